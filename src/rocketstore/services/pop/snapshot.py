"""The snapshot of POP's state (rocketstore.services.pop): ``config/rocketstorePop.json``, every
lane at a revive queue offset, so that an open replays only the revive log's records after it."""

from __future__ import annotations

from typing import Any

from rocketstore.errors import StoreConfigError
from rocketstore.files.configfiles import ConfigFile

__all__ = ["PopState"]


class PopState(ConfigFile):
    """``config/rocketstorePop.json``: a snapshot of every lane at a revive queue offset:
    ``{"reviveOffset": P, "lanes": [{"c": group, "t": topic, "q": queue id, "b": lowest
    un-acked, "nx": next, "f": [[offset, visible at, delivery number], ...]}, ...]}``."""

    FILE_NAME = "rocketstorePop.json"

    def reset(self) -> None:
        super().reset()
        self.revive_offset = 0
        self.lanes: list[dict[str, Any]] = []

    def decode(self, data: Any) -> None:
        if not isinstance(data, dict):
            raise StoreConfigError(f"{self.FILE_NAME} must hold an object")
        offset = data.get("reviveOffset", 0)
        lanes = data.get("lanes") or []
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise StoreConfigError(f"{self.FILE_NAME}: reviveOffset is not an offset: {offset!r}")
        if not isinstance(lanes, list):
            raise StoreConfigError(f"{self.FILE_NAME}: lanes must be a list")
        checked = []
        for lane in lanes:
            try:
                group, topic, qid = str(lane["c"]), str(lane["t"]), _int(lane["q"])
                committed, nxt = _int(lane["b"]), _int(lane["nx"])
                flight = [(_int(o), _int(v), _int(c)) for o, v, c in lane.get("f") or []]
            except (KeyError, TypeError, ValueError) as exc:
                raise StoreConfigError(f"{self.FILE_NAME}: bad lane {lane!r}: {exc}") from None
            if not committed <= nxt or any(not committed <= o < nxt for o, _v, _c in flight):
                raise StoreConfigError(f"{self.FILE_NAME}: lane {group}/{topic}/{qid} is inconsistent")
            checked.append({"c": group, "t": topic, "q": qid, "b": committed, "nx": nxt, "f": flight})
        self.revive_offset, self.lanes = offset, checked

    def encode(self) -> dict[str, Any]:
        return {"lanes": self.lanes, "reviveOffset": self.revive_offset}


def _int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"not a non-negative int: {value!r}")
    return value
