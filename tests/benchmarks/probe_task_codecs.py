"""The codec comparison behind the ``tasks`` extra (docs/reference/dependencies.md):
msgspec, pydantic and cattrs on one call shaped like a real task's.

*check and encode* is what ``Task.defer`` does (reject a wrong type, produce the JSON
payload); *decode* is what the worker does (JSON into the annotated types). Run it in a
fresh virtual environment per library so that each is measured with only its own
dependencies installed, e.g.::

    python -m venv /tmp/v && /tmp/v/bin/pip install pydantic
    /tmp/v/bin/python tests/benchmarks/probe_task_codecs.py pydantic

It needs neither this package nor trio. Prints the best of 5 repeats of 20,000 calls.
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import enum
import functools
import sys
import timeit
import uuid
from collections.abc import Callable
from typing import Any

CALLS = 20_000
REPEATS = 5


class Kind(enum.Enum):
    A = "a"
    B = "b"


@dataclasses.dataclass
class Item:
    sku: str
    qty: int


ARGS: dict[str, Any] = {
    "to": "ada@example.com",
    "subject": "hi",
    "when": datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC),
    "id": uuid.UUID(int=7),
    "kind": Kind.A,
    "items": [Item("x", 1), Item("y", 2)],
}
FIELDS: dict[str, Any] = {
    "to": str,
    "subject": str,
    "when": datetime.datetime,
    "id": uuid.UUID,
    "kind": Kind,
    "items": list[Item],
}


def with_msgspec() -> tuple[Callable[[], bytes], Callable[[bytes], object]]:
    import msgspec

    args_type = msgspec.defstruct("Args", list(FIELDS.items()), forbid_unknown_fields=True)
    builtin = (datetime.datetime, uuid.UUID, decimal.Decimal, bytes)
    encoder, decoder = msgspec.json.Encoder(), msgspec.json.Decoder(args_type)

    def check_and_encode() -> bytes:
        return encoder.encode(msgspec.convert(ARGS, args_type, builtin_types=builtin))

    return check_and_encode, decoder.decode


def with_pydantic() -> tuple[Callable[[], bytes], Callable[[bytes], object]]:
    import pydantic

    model: Any = pydantic.create_model("Args", **{k: (t, ...) for k, t in FIELDS.items()})

    def check_and_encode() -> bytes:
        return model.model_validate(ARGS).model_dump_json().encode()

    return check_and_encode, model.model_validate_json


def with_cattrs() -> tuple[Callable[[], bytes], Callable[[bytes], object]]:
    import cattrs.preconf.json

    converter = cattrs.preconf.json.make_converter()
    converter.register_unstructure_hook(uuid.UUID, str)
    converter.register_structure_hook(uuid.UUID, lambda value, _: uuid.UUID(value))
    args_type = dataclasses.make_dataclass("Args", list(FIELDS.items()))

    def check_and_encode() -> bytes:
        return converter.dumps(args_type(**ARGS)).encode()

    def decode(data: bytes) -> object:
        return converter.loads(data, args_type)

    return check_and_encode, decode


LIBRARIES = {"msgspec": with_msgspec, "pydantic": with_pydantic, "cattrs": with_cattrs}


def main(names: list[str]) -> None:
    for name in names or list(LIBRARIES):
        try:
            encode, decode = LIBRARIES[name]()
        except ImportError:
            print(f"{name:9s} not installed")
            continue
        payload = encode()
        cases = (("check+encode", encode), ("decode", functools.partial(decode, payload)))
        for label, fn in cases:
            best = min(timeit.repeat(fn, number=CALLS, repeat=REPEATS)) / CALLS
            print(f"{name:9s} {label:13s} {best * 1e6:6.2f} us")


if __name__ == "__main__":
    main(sys.argv[1:])
