"""Which environment values are credentials, and what is kept in their place (R-SEC-2).

A value is secret by its variable's name (TOKEN, SECRET, PASSWORD, KEY, ...)
or by its shape (AWS key ids, GitHub tokens, JWTs, PEM private keys, Slack
tokens, long high-entropy strings). Fail closed: a false positive costs only a
hash. In the journal, job files, replies, status and attempt metadata such a
value appears only as a keyed hash (HMAC-SHA256 under the run's private key),
so equal secrets still fingerprint equally and dedup keeps working.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import re
from collections import Counter

PREFIX = "praxist-secret:hmac-sha256:"
NAME_WORDS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASSPHRASE", "CREDENTIAL", "API_KEY",
              "APIKEY", "ACCESS_KEY", "PRIVATE_KEY", "AUTH", "SESSION_KEY", "_KEY", "PWD")
NAME_EXCEPTIONS = ("PWD", "OLDPWD")  # the shell's working directory, not a password
SHAPES = (
    re.compile(r"(?:A3T[A-Z0-9]|ABIA|ACCA|AKIA|ASIA)[0-9A-Z]{16}"),
    re.compile(r"(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9_]{36}"),
    re.compile(r"github_pat_[0-9A-Za-z_]{60,}"),
    re.compile(r"eyJ[A-Za-z0-9_=-]+\.[A-Za-z0-9_=-]+\.?[A-Za-z0-9_.+/=-]*"),
    re.compile(r"-----BEGIN[ A-Z0-9_-]*PRIVATE KEY"),
    re.compile(r"xox[baprs]-[A-Za-z0-9-]+"),
)
HIGH_ENTROPY = re.compile(r"[A-Za-z0-9+/=_-]{20,}")
ENTROPY_BITS = 4.5  # bits per character (detect-secrets' default for base64 strings)


def is_secret(name: str, value: str) -> bool:
    upper = name.upper()
    if upper not in NAME_EXCEPTIONS and any(word in upper for word in NAME_WORDS):
        return bool(value)
    if any(shape.search(value) for shape in SHAPES):
        return True
    return any(_entropy(token) >= ENTROPY_BITS for token in HIGH_ENTROPY.findall(value))


def _entropy(text: str) -> float:
    counts = Counter(text)
    return -sum(n / len(text) * math.log2(n / len(text)) for n in counts.values())


def placeholder(key: bytes, value: str) -> str:
    return PREFIX + hmac.new(key, value.encode(), hashlib.sha256).hexdigest()


def is_placeholder(value: str) -> bool:
    return value.startswith(PREFIX)


def holds_placeholder(env: dict[str, str]) -> bool:
    """Whether a redacted request's ``env`` had a secret: only then does the vault keep its
    raw values (``Vault.redact``), and only then is there anything to scrub."""
    return any(map(is_placeholder, env.values()))
