"""The wrapper's ``<wrapper>.conf`` (metax_core.runtime.wrapper_conf, C4/R-MACA): what the agent renders reads back
the same, as the C wrapper reads it (first line of a key wins, other lines ignored); bad values are refused
naming the field. The real wrapper reads a rendered file in tests/runtime/test_wrapper_runc.py."""

from __future__ import annotations

import pytest

from metax_core.errors import InvalidSpec
from metax_core.runtime import handler, wrapper_conf


@pytest.mark.parametrize(
    "conf",
    [
        wrapper_conf.WrapperConf(),
        wrapper_conf.WrapperConf(socket="/run/x/edit.sock", runc="/usr/local/sbin/runc"),
    ],
)
def test_render_then_parse_is_the_same(conf: wrapper_conf.WrapperConf) -> None:
    text = wrapper_conf.render(conf)
    assert text.startswith("#") and wrapper_conf.parse(text) == conf
    assert ("runc=" in text) is (conf.runc is not None)


def test_read_as_the_wrapper_reads_it() -> None:
    text = "# c\nsocket=/a.sock\nsocket=/b.sock\nrunc=\nnoise\nrunc=/bin/runc\n"
    assert wrapper_conf.parse(text) == wrapper_conf.WrapperConf(socket="/a.sock", runc="/bin/runc")
    assert wrapper_conf.parse("") == wrapper_conf.WrapperConf(socket=handler.EDIT_SOCKET_HOST_PATH)
    assert wrapper_conf.path_of(handler.WRAPPER_HOST_PATH) == handler.WRAPPER_HOST_PATH + ".conf"


@pytest.mark.parametrize(
    ("conf", "field"),
    [
        (wrapper_conf.WrapperConf(socket="relative.sock"), "socket"),
        (wrapper_conf.WrapperConf(runc="/bin/runc\nsocket=/evil"), "runc"),
        (wrapper_conf.WrapperConf(socket="/" + "x" * 5000), "socket"),
    ],
)
def test_bad_values_are_refused_naming_the_field(conf: wrapper_conf.WrapperConf, field: str) -> None:
    with pytest.raises(InvalidSpec, match=f"settings: {field}: must be an absolute path of one line"):
        wrapper_conf.render(conf, "settings")
