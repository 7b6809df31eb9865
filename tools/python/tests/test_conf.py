"""test_conf: conf handling: text from str and dict, the library's
validation and messages, XSEG_CONF export, and when a conf can be set.
Changing the process-wide conf runs in fresh interpreters."""
import unittest

from _common import run_py

from xseg import _conf


class FormatTest(unittest.TestCase):
    def test_none_and_str(self):
        self.assertIsNone(_conf.format_conf(None))
        self.assertEqual(_conf.format_conf(" max_mapped:40GB "), "max_mapped:40GB")

    def test_dict(self):
        text = _conf.format_conf({"max_mapped": "40GB", "memory_fraction": 0.9,
                                  "alloc_retries": 5, "caching": True, "verbose": False})
        self.assertEqual(text, "max_mapped:40GB,memory_fraction:0.9,alloc_retries:5,"
                               "caching:on,verbose:off")

    def test_bad_shapes(self):
        with self.assertRaises(TypeError):
            _conf.format_conf(["max_mapped:1GB"])
        with self.assertRaises(ValueError):
            _conf.format_conf({"a,b": 1})
        with self.assertRaises(ValueError):
            _conf.format_conf({"max_mapped": "1GB,caching:off"})
        with self.assertRaises(ValueError):
            _conf.format_conf({"max_mapped": None})

    def test_items(self):
        self.assertEqual(_conf.items("backend:host, max_mapped : 1GB,,junk"),
                         {"backend": "host", "max_mapped": "1GB"})


SET_AND_READ = """
import os, xseg
xseg.set_conf({conf!r})
print(os.environ.get("XSEG_CONF"))
s = xseg.raw_stats(0)
print(s.mapped_cap, s.device_total)
"""


class SetConfTest(unittest.TestCase):
    def test_set_conf_applies_and_exports(self):
        r = run_py(SET_AND_READ.format(conf="backend:host,host_capacity:1GB,max_mapped:256MB"),
                   env={"XSEG_CONF": None})
        self.assertEqual(r.returncode, 0, r.stderr)
        env_line, numbers = r.stdout.strip().splitlines()
        self.assertEqual(env_line, "backend:host,host_capacity:1GB,max_mapped:256MB")
        self.assertEqual(numbers.split(), [str(256 << 20), str(1 << 30)])

    def test_dict_conf(self):
        r = run_py(SET_AND_READ.format(conf={"backend": "host", "host_capacity": "1GB",
                                             "memory_fraction": 0.5}),
                   env={"XSEG_CONF": None})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.strip().splitlines()[1].split(),
                         [str(512 << 20), str(1 << 30)])

    def test_bad_key_message(self):
        r = run_py("import xseg\ntry:\n    xseg.set_conf('bogus:1')\n"
                   "except ValueError as e:\n    print('VE', e)\n")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn('VE xseg conf: unknown key "bogus"', r.stdout)
        self.assertIn("valid keys are backend", r.stdout)

    def test_bad_value_message(self):
        r = run_py("import xseg\ntry:\n    xseg.set_conf({'max_mapped': 'abc'})\n"
                   "except ValueError as e:\n    print('VE', e)\n")
        self.assertIn('bad value "abc" for key "max_mapped"', r.stdout, r.stderr)

    def test_too_late_once_the_allocator_exists(self):
        r = run_py("import xseg\nxseg.memory_stats(0)\ntry:\n"
                   "    xseg.set_conf('max_mapped:1GB')\n"
                   "except xseg.XsegError as e:\n    print('XE', e)\n",
                   env={"XSEG_CONF": "backend:host"})
        self.assertIn("XE", r.stdout, r.stderr)
        self.assertIn("already exists", r.stdout)

    def test_environment_conf_is_used(self):
        r = run_py("import xseg\ns = xseg.raw_stats(0)\nprint(s.device_total, s.mapped_cap)",
                   env={"XSEG_CONF": "backend:host,host_capacity:2GB,memory_fraction:0.25"})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.split(), [str(2 << 30), str(512 << 20)])

    def test_bad_environment_conf(self):
        r = run_py("import xseg\ntry:\n    xseg.memory_stats(0)\n"
                   "except xseg.XsegError as e:\n    print('XE', e)\n",
                   env={"XSEG_CONF": "backend:host,page_size:3MB"})
        self.assertIn("XE", r.stdout, r.stderr)
        self.assertIn("from the XSEG_CONF environment variable", r.stdout)


if __name__ == "__main__":
    unittest.main()
