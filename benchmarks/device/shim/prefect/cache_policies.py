NO_CACHE = None
