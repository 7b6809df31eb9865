"""_conf: the allocator configuration ("key:value,..." as in docs/config.md)
from a string or a dict, and setting it for the process-wide allocators."""
import os

from . import _lib


def format_conf(conf):
    """Conf text from None (-> None), a "key:value,..." string, or a dict
    whose values may be str, int, float or bool (True -> on)."""
    if conf is None:
        return None
    if isinstance(conf, str):
        return conf.strip()
    if isinstance(conf, dict):
        return ",".join(f"{_key(k)}:{_value(k, v)}" for k, v in conf.items())
    raise TypeError(f"xseg conf must be a str, a dict or None, not {type(conf).__name__}")


def _key(k):
    if not isinstance(k, str) or not k or any(c in k for c in ",: "):
        raise ValueError(f"xseg conf: bad key {k!r}")
    return k


def _value(k, v):
    if isinstance(v, bool):
        return "on" if v else "off"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str) and v and "," not in v:
        return v
    raise ValueError(f"xseg conf: bad value {v!r} for key {k!r}")


def items(text):
    """{key: value} of conf text (no validation: the library does that)."""
    out = {}
    for item in (text or "").split(","):
        if ":" in item:
            k, v = item.split(":", 1)
            out[k.strip()] = v.strip()
    return out


def effective_text(conf=None):
    """The conf that the process-wide allocators will use."""
    text = format_conf(conf)
    return text if text is not None else os.environ.get("XSEG_CONF", "")


def set_conf(conf):
    """Set the conf of the process-wide allocators (before their first use).

    Also exported as XSEG_CONF, which CUDA-graph pools and child processes
    read.  Raises ValueError for a bad conf (the library's message), and
    XsegError when an allocator already exists."""
    text = format_conf(conf)
    lib = _lib.load()
    st = lib.xseg_set_default_conf(text.encode() if text is not None else None)
    if st == 2:  # XSEG_ERR_CONFIG
        raise ValueError(_lib.last_error())
    _lib.check(st, "xseg_set_default_conf")
    if text is not None:
        os.environ["XSEG_CONF"] = text
    return text
