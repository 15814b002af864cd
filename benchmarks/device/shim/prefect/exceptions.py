class MissingContextError(RuntimeError):
    pass
