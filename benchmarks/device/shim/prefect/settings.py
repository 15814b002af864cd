class _Unset:
    @staticmethod
    def value():
        return None


PREFECT_API_URL = _Unset()
