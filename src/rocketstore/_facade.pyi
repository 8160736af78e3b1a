# The compiled base of MessageStore: the same methods as its pure twin's (rocketstore._facade_py).
from rocketstore._facade_py import FacadeBase as FacadeBase

def set_docs(docs: dict[str, str], /) -> None: ...
