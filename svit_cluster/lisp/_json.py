"""JSON text as ``json-stringify`` writes it: serde_json's output, byte for byte.

The reference serialises with serde_json, so a script that compares or hashes
``json-stringify`` output must see the same bytes here: keys sorted (serde_json's
default ``BTreeMap``), no spaces, non-ASCII kept, control characters escaped as
``\\u00XX``, and numbers as serde_json prints them. Integers print as digits;
a finite float prints as Ryu's shortest round-trip digits in serde_json's
layout (the ``ryu`` crate's ``format_finite``): plain decimal while the decimal
exponent ``kk`` (``10^(kk-1) <= |v| < 10^kk``) is in ``-5..=21``
(``1e20`` -> ``100000000000000000000.0``, ``0.000001``, ``1.5``, ``2.0``),
otherwise scientific without a ``+`` or leading zeros (``1e21``, ``1e-7``,
``1.5e300``). Python's shortest digits (``repr``) are the same digits Ryu
finds; only the layout differs from :func:`json.dumps` (``1e+21``, ``1e-07``).
"""

from __future__ import annotations

import json
import math
from decimal import Decimal
from typing import Any

__all__ = ["format_float", "json_text"]


def format_float(x: float) -> str:
    """One finite float as serde_json (Ryu) prints it.

    Raises:
        ValueError: ``x`` is NaN or infinite (values never hold those).
    """
    if not math.isfinite(x):
        raise ValueError("non-finite number")
    sign = "-" if math.copysign(1.0, x) < 0 else ""
    if x == 0:
        return sign + "0.0"
    tup = Decimal(repr(abs(x))).as_tuple()
    digits = "".join(map(str, tup.digits)).lstrip("0")
    exp = int(tup.exponent)
    stripped = digits.rstrip("0")
    exp += len(digits) - len(stripped)
    digits = stripped
    length = len(digits)
    kk = length + exp  # 10^(kk-1) <= |x| < 10^kk
    if 0 <= exp and kk <= 21:
        out = digits + "0" * exp + ".0"
    elif 0 < kk <= 21:
        out = digits[:kk] + "." + digits[kk:]
    elif -6 < kk <= 0:
        out = "0." + "0" * (-kk) + digits
    elif length == 1:
        out = f"{digits}e{kk - 1}"
    else:
        out = f"{digits[0]}.{digits[1:]}e{kk - 1}"
    return sign + out


def json_text(plain: Any) -> str:
    """Compact JSON text of untagged JSON data (``to_plain_json`` output), serde_json style.

    Nesting is bounded by the caller (values are depth-checked before they get here).
    """
    t = type(plain)
    if plain is None:
        return "null"
    if t is bool:
        return "true" if plain else "false"
    if t is int:
        return str(plain)
    if t is float:
        return format_float(plain)
    if t is str:
        return json.dumps(plain, ensure_ascii=False)
    if t is list:
        return "[" + ",".join(json_text(v) for v in plain) + "]"
    if t is dict:
        return "{" + ",".join(
            json.dumps(k, ensure_ascii=False) + ":" + json_text(plain[k]) for k in sorted(plain)
        ) + "}"
    raise TypeError(f"not JSON data: {t.__name__}")
