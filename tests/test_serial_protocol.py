"""The host side of the serial protocol (edgepack/mcu/protocol.py) against a fake serial port: frames, replies,
error statuses, CRC and timeouts, with no firmware and no QEMU."""

from __future__ import annotations

import struct
import zlib

import pytest

from edgepack.errors import DeviceReplyError, DimError, RunError
from edgepack.mcu import protocol as P

pytestmark = pytest.mark.unit


class FakeSerialPort:
    """Stands in for a pyserial port: records what the host writes; for each whole request frame it queues
    the reply `answer(cmd, payload)` gives ((status, payload) or raw bytes) and hands it out on read()."""

    def __init__(self, answer):
        self.answer = answer
        self.timeout = None
        self.written = b""
        self.requests: list[tuple[int, bytes]] = []
        self._in = b""

    def write(self, data: bytes) -> None:
        self.written += data
        while len(self.written) >= 9:
            assert self.written[0] == P.SYNC
            cmd, status, n = struct.unpack("<BBH", self.written[1:5])
            if len(self.written) < 9 + n:
                return
            body, crc = self.written[1:5 + n], struct.unpack("<I", self.written[5 + n:9 + n])[0]
            assert status == 0 and zlib.crc32(body) == crc
            self.requests.append((cmd, body[4:]))
            self.written = self.written[9 + n:]
            out = self.answer(cmd, body[4:])
            self._in += out if isinstance(out, bytes) else P.frame(cmd, out[1], out[0])

    def flush(self) -> None:
        pass

    def read(self, n: int) -> bytes:
        data, self._in = self._in[:n], self._in[n:]
        return data


def test_frame_layout():
    f = P.frame(P.RUN, b"\x01\x02", status=0)
    body = bytes([P.RUN, 0, 2, 0, 1, 2])
    assert f == bytes([0xEB]) + body + struct.pack("<I", zlib.crc32(body))


def test_request_returns_the_reply_and_skips_noise():
    port = FakeSerialPort(lambda cmd, payload: b"boot log\r\n" + P.frame(cmd, payload[::-1]))
    r = P.Link(port, timeout=1).request(P.SET_INPUT, b"abc")
    assert (r.cmd, r.status, r.payload) == (P.SET_INPUT, 0, b"cba")
    assert port.requests == [(P.SET_INPUT, b"abc")]


def test_error_status_raises_with_the_device_message():
    port = FakeSerialPort(lambda cmd, payload: (7, b"kernel 3 failed"))
    with pytest.raises(DeviceReplyError) as e:
        P.Link(port, timeout=1).request(P.RUN)
    assert str(e.value) == "the device answered 'run failed': kernel 3 failed"
    assert e.value.reply.status == 7


def test_dims_out_of_range_is_a_dim_error():
    port = FakeSerialPort(lambda cmd, payload: (P.ST_SHAPE, b"dim seq = 999 is outside 1..64"))
    with pytest.raises(DimError, match="dims out of range"):
        P.Link(port, timeout=1).request(P.RUN, struct.pack("<q", 999))


def test_reply_to_another_command_is_refused():
    port = FakeSerialPort(lambda cmd, payload: P.frame(P.INFO, b"?"))
    with pytest.raises(RunError, match="answered command 1 to command 3"):
        P.Link(port, timeout=1).request(P.RUN)


def test_corrupt_reply_fails_its_crc():
    def answer(cmd, payload):
        f = bytearray(P.frame(cmd, b"data"))
        f[6] ^= 0xFF  # one payload byte flipped on the line
        return bytes(f)

    with pytest.raises(RunError, match="CRC"):
        P.Link(FakeSerialPort(answer), timeout=1).request(P.GET_OUTPUT)


def test_silent_device_times_out():
    with pytest.raises(RunError, match="did not answer in time"):
        P.Link(FakeSerialPort(lambda cmd, payload: b""), timeout=0.2).request(P.INFO)


def test_info_parse():
    info = P.Info.parse("board mps2-an386\npackage mlp\ndim seq 1 64\ninput x float32\noutput y float32\n")
    assert info.fields == {"board": "mps2-an386", "package": "mlp"}
    assert info.dims == [("seq", 1, 64)]
    assert info.inputs == [("x", "float32")] and info.outputs == [("y", "float32")]
