"""Parameter vocabulary of the PyCOMPSs test double."""


class _Direction:
    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"pycompss_double.{self.name}"


_NAMES = ["IN", "OUT", "INOUT", "CONCURRENT", "COMMUTATIVE", "IN_DELETE",
          "FILE_IN", "FILE_OUT", "FILE_INOUT", "COLLECTION_IN",
          "COLLECTION_OUT", "COLLECTION_INOUT", "COLLECTION_FILE_IN",
          "COLLECTION_FILE_OUT", "COLLECTION_FILE_INOUT", "DICTIONARY_IN",
          "DICTIONARY_OUT", "DICTIONARY_INOUT"]
for _name in _NAMES:
    globals()[_name] = _Direction(_name)

Type = "type"
Direction = "direction"
Depth = "depth"
Prefix = "prefix"
