"""test_share: xseg.share on the host backend (no torch, no GPU): two
processes share a dedicated block through a socketpair and write and read
patterns through ctypes, the exporter frees (and allocates new memory)
while the importer still maps it, and bad descriptions are refused with
nothing mapped.  The tensor helpers run only where torch is importable (CPU
tensors over the host backend's memory)."""
import ctypes
import os
import socket
import subprocess
import sys
import textwrap
import unittest

import _common
from xseg import XsegError, _lib, share

MiB = 1 << 20


def pattern(n, seed):
    """n bytes that differ for each seed (a rotated 0..255 run, repeated)."""
    run = bytes((i * 7 + seed) & 0xFF for i in range(256))
    return (run * (n // 256 + 1))[:n]


def checksum(d):
    """The description's checksum as xseg computes it (docs/sharing.md):
    FNV-1a 64 over the struct with the descriptors and the checksum zeroed."""
    c = share.ExportDesc.from_buffer_copy(bytes(d))
    c.check = 0
    c.token_fd = 0
    for p in c.pieces:
        p.fd = 0
    h = 0xCBF29CE484222325
    for b in bytes(c):
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


CHILD = textwrap.dedent("""
    import ctypes, socket, sys
    from xseg import share
    from test_share import pattern
    sock = socket.socket(fileno=int(sys.argv[1]))
    def expect(cond, code):
        if not cond:
            sys.exit(code)
    with share.recv(sock) as d:
        p = share.import_desc(d)
        n = d.requested
    half = n // 2
    expect(ctypes.string_at(p, half) == pattern(half, 21), 11)
    ctypes.memmove(p + half, pattern(half, 22), half)
    sock.sendall(b"w")
    expect(sock.recv(1) == b"c", 12)  # the exporter freed it and filled new memory
    expect(ctypes.string_at(p, half) == pattern(half, 21), 13)
    expect(ctypes.string_at(p + half, half) == pattern(half, 22), 14)
    ctypes.memmove(p, pattern(n, 23), n)  # still the importer's to write
    expect(ctypes.string_at(p, n) == pattern(n, 23), 15)
    expect(share.share_stats()["imported_bytes"]["current"] >= n, 16)
    share.unimport(p)
    expect(share.share_stats()["imported_blocks"]["current"] == 0, 17)
    sock.sendall(b"k")
""")


def start_child(code, sock):
    env = dict(os.environ)
    here = os.path.dirname(os.path.abspath(__file__))
    env["PYTHONPATH"] = os.pathsep.join([str(_common.PKG_ROOT), here] +
                                        [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                                         if p])
    return subprocess.Popen([sys.executable, "-c", code, str(sock.fileno())],
                            pass_fds=(sock.fileno(),), env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def expect_byte(test, sock, want, proc):
    """The child's next byte is `want`; else fail with its exit code (the
    step that failed) and what it printed."""
    got = sock.recv(1)
    if got != want:
        try:
            out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        test.fail(f"child sent {got!r}, not {want!r}; exit code {proc.returncode}: {err}{out}")


class TwoProcesses(unittest.TestCase):
    def test_patterns_both_ways_and_the_exporters_free(self):
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        n = 6 * MiB
        ptr = share.alloc_shareable(n)
        freed = False
        try:
            ctypes.memmove(ptr, pattern(n, 21), n)
            proc = start_child(CHILD, child)
            child.close()
            with share.export_ptr(ptr) as d:
                share.send(parent, d)
            expect_byte(self, parent, b"w", proc)
            self.assertEqual(ctypes.string_at(ptr + n // 2, n // 2), pattern(n // 2, 22),
                             "the importer's writes")
            share.free(ptr)  # while the importer maps it
            freed = True
            fresh = [share.alloc_shareable(n) for _ in range(3)]  # never its pages
            for q in fresh:
                ctypes.memset(q, 0x5A, n)
            parent.sendall(b"c")
            expect_byte(self, parent, b"k", proc)
            out, err = proc.communicate(timeout=60)
            self.assertEqual(proc.returncode, 0, f"child: {err}{out}")
            for q in fresh:
                self.assertEqual(ctypes.string_at(q, 4096), b"\x5a" * 4096)
                share.free(q)
        finally:
            if not freed:
                share.free(ptr)
            parent.close()
        self.assertEqual(share.share_stats()["dedicated_blocks"]["current"], 0)


class Descriptions(unittest.TestCase):
    def setUp(self):
        self.ptr = share.alloc_shareable(3 * MiB)
        self.stats0 = share.share_stats()

    def tearDown(self):
        if self.ptr:
            share.free(self.ptr)

    def refused(self, desc, words):
        before = share.share_stats()
        with self.assertRaises(XsegError) as cm:
            share.import_desc(desc)
        self.assertIn(words, str(cm.exception))
        after = share.share_stats()
        self.assertEqual(after["imported_blocks"]["current"],
                         before["imported_blocks"]["current"], "nothing mapped")
        self.assertEqual(after["refused_imports"], before["refused_imports"] + 1)

    def test_the_description_is_filled(self):
        rounded, requested = share.block_size(self.ptr)
        self.assertEqual(requested, 3 * MiB)
        with share.export_ptr(self.ptr) as d:
            self.assertEqual((d.magic, d.version), (share.EXPORT_MAGIC, share.EXPORT_VERSION))
            self.assertEqual(d.pid, os.getpid())
            self.assertEqual((d.size, d.requested, d.npieces), (rounded, 3 * MiB, 1))
            self.assertEqual((d.pieces[0].offset, d.pieces[0].size), (0, rounded))
            self.assertGreaterEqual(d.pieces[0].fd, 0)
            self.assertEqual(d.check, checksum(d))
            self.assertIn("3145728 asked", repr(d))
        self.assertEqual((d.pieces[0].fd, d.token_fd), (-1, -1), "closed by the with block")
        self.assertEqual(share.share_stats()["exports"], self.stats0["exports"] + 1)

    def test_an_ordinary_allocation_is_not_exported(self):
        lib = _lib.load()
        p = lib.xseg_torch_alloc(1 * MiB, 0, None)
        self.assertTrue(p, _lib.last_error())
        try:
            with self.assertRaises(XsegError) as cm:
                share.export_ptr(p)
            self.assertIn("ordinary allocation", str(cm.exception))
        finally:
            lib.xseg_torch_free(p, 0, 0, None)
        with self.assertRaises(XsegError):
            share.export_ptr(self.ptr + 4096)  # not a block's start

    def test_bad_descriptions_are_refused(self):
        with share.export_ptr(self.ptr) as good:
            bad = share.ExportDesc.from_buffer_copy(bytes(good))
            bad.size += 2 * MiB  # damaged: the checksum says so
            self.refused(bad, "checksum")
            bad = share.ExportDesc.from_buffer_copy(bytes(good))
            bad.magic = 0x1234
            self.refused(bad, "not an xseg export description")
            bad = share.ExportDesc.from_buffer_copy(bytes(good))
            bad.nonce ^= 1  # a guessed nonce, with a checksum to match
            bad.check = checksum(bad)
            self.refused(bad, "no longer holds the description's nonce")
            q = share.import_desc(good)  # the same process may map it too
            try:
                self.assertEqual(ctypes.string_at(q, 16), ctypes.string_at(self.ptr, 16))
                self.refused(good, "already imported")
            finally:
                share.unimport(q)
            with self.assertRaises(XsegError):
                share.unimport(q)  # once only
            share.free(self.ptr)  # freed by its exporter: refused from now on
            self.ptr = None
            self.refused(good, "was freed by its exporter")

    def test_a_view_must_fit_the_block(self):
        with share.export_ptr(self.ptr) as d:
            share.check_view(d, 3 * MiB)
            share.check_view(d, MiB, 2 * MiB)
            for nbytes, offset in ((3 * MiB + 1, 0), (MiB, 2 * MiB + 1), (1, -1)):
                with self.assertRaises(ValueError) as cm:
                    share.check_view(d, nbytes, offset)
                self.assertIn(str(nbytes), str(cm.exception))

    def test_what_is_not_a_description_is_not_received(self):
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        with a, b:
            a.sendall(b"not a description")
            a.shutdown(socket.SHUT_WR)
            with self.assertRaises(XsegError) as cm:
                share.recv(b)
            self.assertIn("not one description", str(cm.exception))


TORCH_CHILD = textwrap.dedent("""
    import socket, sys, torch
    from xseg import share
    sock = socket.socket(fileno=int(sys.argv[1]))
    t = share.recv_tensor(sock)
    ok = t.shape == (64, 32) and t.dtype == torch.float32 and bool(
        (t == torch.arange(64 * 32, dtype=torch.float32).view(64, 32)).all())
    t.mul_(2)
    del t  # unmapped by the storage's deleter
    ok = ok and share.share_stats()["imported_blocks"]["current"] == 0
    sock.sendall(b"1" if ok else b"0")
""")


def _have_torch():
    try:
        import torch  # noqa: F401,PLC0415
    except ImportError:
        return False
    return True


@unittest.skipUnless(_have_torch(), "torch is not importable")
class Tensors(unittest.TestCase):
    def test_a_tensor_shared_with_another_process(self):
        import torch  # noqa: PLC0415
        t = share.empty_shareable((64, 32), torch.float32)
        t.copy_(torch.arange(64 * 32, dtype=torch.float32).view(64, 32))
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        with parent:
            proc = start_child(TORCH_CHILD, child)
            child.close()
            share.send_tensor(parent, t)
            expect_byte(self, parent, b"1", proc)
            out, err = proc.communicate(timeout=120)
        self.assertEqual(proc.returncode, 0, f"child: {err}{out}")
        want = torch.arange(64 * 32, dtype=torch.float32).view(64, 32) * 2
        self.assertTrue(bool((t == want).all()), "the child's writes")
        blocks = share.share_stats()["dedicated_blocks"]["current"]
        del t  # the storage's deleter frees the block
        self.assertEqual(share.share_stats()["dedicated_blocks"]["current"], blocks - 1)


if __name__ == "__main__":
    unittest.main()
