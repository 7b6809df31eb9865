"""test_bench: bench_models.py and bench_report.py without a GPU or torch:
the per-call records (wall and CPU times, xseg's counters per call), the
interleaved schedule of rounds, medians and spread over rounds, the verdicts
of issue 13's model figure, the tables, the workloads' schedules against
their configs' limits, and the parent/child plumbing with a torch that
cannot be imported (one subprocess per (mode, round), partial results after
a timeout, the budget)."""
import contextlib
import io
import json
import os
import tempfile
import unittest
from unittest import mock

import _common  # noqa: F401 (puts the package's folder on sys.path)
import bench_models as bm
import bench_report as br


class FakeCuda:
    def __init__(self):
        self.syncs = 0

    def synchronize(self):
        self.syncs += 1


class FakeTorch:
    def __init__(self):
        self.cuda = FakeCuda()


class TimedTest(unittest.TestCase):
    def tearDown(self):
        bm._counters = None

    def test_counters_per_call(self):
        state = {k: 0 for k in bm.CALL_COUNTERS}
        state["xseg.syncs"] = 5
        bm._counters = lambda: dict(state)

        def call():
            state["xseg.moved_bytes"] += 2 << 20
            state["xseg.syncs"] += 1
            state["xseg.driver_calls.map"] += 3
            return "out"

        torch, calls = FakeTorch(), []
        out, dt = bm.timed(torch, call, calls)
        self.assertEqual(out, "out")
        self.assertGreaterEqual(dt, 0.0)
        self.assertEqual(torch.cuda.syncs, 2)
        self.assertEqual(len(calls), 1)
        self.assertEqual(calls[0][2], {"moved_bytes": 2 << 20, "syncs": 1, "map": 3,
                                       "create": 0, "unmap": 0})

    def test_no_counters_outside_xseg(self):
        calls = []
        bm.timed(FakeTorch(), lambda: None, calls)
        self.assertEqual(len(calls[0]), 2)

    def test_throughput_reads_times_only(self):
        passes = [[[2.0, 1.0, {"syncs": 9}], [4.0, 1.0, {}]],
                  [[1.0, 1.0, {"syncs": 0}], [5.0, 1.0, {}]],
                  [[3.0, 1.0, {}], [2.0, 1.0, {}]]]
        # the first pass warms up: best of the others, 1.0 and 2.0 s
        self.assertAlmostEqual(bm.best_of_calls(passes, [10, 20]), 30 / 3.0)


def result(mode, peak, throughput, digest="h"):
    return {"workload": "gpt2", "mode": mode, "peak_device_bytes": peak,
            "throughput": throughput, "output_hash": digest}


class VariantTest(unittest.TestCase):
    def test_names(self):
        self.assertEqual(bm.variant_name("handle_size:2MB"), "xseg[handle_size:2MB]")
        self.assertEqual(bm.split_mode("xseg[handle_size:2MB,placement:pages]", None),
                         ("xseg", "handle_size:2MB,placement:pages"))
        self.assertEqual(bm.split_mode("native", "x:1"), ("native", "x:1"))
        self.assertEqual(bm.split_mode("xseg", "x:1"), ("xseg", "x:1"))

    def test_parse(self):
        args = bm.parse(["--variant", "a:1", "--variant", "b:2"])
        self.assertEqual(args.variant, ["a:1", "b:2"])
        self.assertEqual(bm.parse([]).variant, [])

    def test_verdict_and_rows(self):
        v = "xseg[handle_size:2MB]"
        results = {("gpt2", "native"): result("native", 100, 1000.0),
                   ("gpt2", "expandable"): result("expandable", 90, 990.0),
                   ("gpt2", "xseg"): result("xseg", 85, 950.0),
                   ("gpt2", v): result(v, 95, 1010.0)}
        verdict = bm.compare(results)["gpt2"]
        self.assertTrue(verdict["outputs_identical"])
        self.assertFalse(verdict["xseg_throughput_within_2pct"])
        self.assertEqual(verdict["variants"][v]["peak_below_expandable"], False)
        self.assertAlmostEqual(verdict["variants"][v]["throughput_vs_native"], 1.01)
        # the figure: xseg 950 < 0.99 * 1000; the variant is fast enough but
        # takes more memory than expandable
        self.assertFalse(verdict["figure"]["xseg"]["met"])
        self.assertFalse(verdict["figure"]["xseg"]["throughput_ok"])
        self.assertTrue(verdict["figure"]["xseg"]["memory_ok"])
        self.assertTrue(verdict["figure"][v]["throughput_ok"])
        self.assertFalse(verdict["figure"][v]["memory_ok"])
        modes = [m for m, _, _ in bm.rows(results, "gpt2")]
        self.assertEqual(modes, ["native", "expandable", "xseg", v])
        for r in results.values():
            r.update(peak_drop_polled_bytes=r["peak_device_bytes"], peak_reserved_bytes=1,
                     peak_allocated_bytes=1, throughput_unit="training tokens/s")
        lines = bm.table(results, bm.compare(results)).splitlines()
        # the variant's full name, then its columns where the others have theirs
        self.assertEqual(lines[5].split()[1], v)
        self.assertEqual(lines[2].index("0.000"), lines[5].index("0.000"))
        results[("gpt2", v)]["output_hash"] = "other"
        self.assertFalse(bm.compare(results)["gpt2"]["outputs_identical"])


def run_of(w, mode, thr, peak, digest="h", **extra):
    r = {"workload": w, "mode": mode, "throughput": thr, "peak_device_bytes": peak,
         "output_hash": digest, "throughput_unit": "tokens/s", "peak_reserved_bytes": peak,
         "peak_allocated_bytes": peak // 2, "call_times": [[1.0, 1.0]]}
    r.update(extra)
    return r


def results_of(per_mode, w="llama", rounds=5):
    """Aggregated rows of workload w from {mode: (throughputs, peaks)}."""
    out = {}
    for m, (thr, peak) in per_mode.items():
        runs = [run_of(w, m, thr[i % len(thr)], peak[i % len(peak)]) for i in range(rounds)]
        out[(w, m)] = br.aggregate(runs)
    return out


class ScheduleTest(unittest.TestCase):
    def test_one_process_per_workload(self):
        plan = br.schedule(["llama", "gpt2"], ["native", "expandable", "xseg"], 5, False)
        self.assertEqual(len(plan), 5)
        jobs = [j for rnd in plan for j in rnd]
        for w in ("llama", "gpt2"):
            for m in ("native", "expandable", "xseg"):
                self.assertEqual(sum(1 for mm, ws in jobs if mm == m and ws == [w]), 5)
        # each round rotates the modes: the first mode differs round to round
        self.assertEqual([rnd[0][0] for rnd in plan],
                         ["native", "expandable", "xseg", "native", "expandable"])
        # within a round, the modes of one workload run back to back
        self.assertEqual(plan[1][:3], [("expandable", ["llama"]), ("xseg", ["llama"]),
                                       ("native", ["llama"])])

    def test_one_process_per_mode_and_round(self):
        ws = ["llama", "gpt2", "moe", "bert"]
        plan = br.schedule(ws, ["native", "expandable", "xseg"], 5, True)
        for r, rnd in enumerate(plan):
            self.assertEqual(sorted(m for m, _ in rnd), ["expandable", "native", "xseg"])
            orders = {tuple(w) for _, w in rnd}
            self.assertEqual(len(orders), 1)  # the same workload order for every mode
            order = list(orders.pop())
            self.assertEqual(sorted(order), sorted(ws))
            self.assertEqual(order[0], ws[r % len(ws)])
        self.assertEqual(plan[2][0][0], "xseg")

    def test_round_fits(self):
        self.assertTrue(br.round_fits(1.0, []))
        self.assertFalse(br.round_fits(80.0, [90.0]))
        self.assertTrue(br.round_fits(100.0, [60.0, 90.0]))
        self.assertFalse(br.round_fits(80.0, [60.0, 90.0]))
        # a slow first round (one-off costs) does not count once others ran
        self.assertTrue(br.round_fits(70.0, [120.0, 60.0, 65.0]))
        self.assertFalse(br.round_fits(64.0, [120.0, 60.0, 65.0]))


class StatsTest(unittest.TestCase):
    def test_summarize(self):
        s = br.summarize([100.0, 90.0, 110.0, 104.0, 96.0])
        self.assertEqual((s["median"], s["min"], s["max"]), (100.0, 90.0, 110.0))
        self.assertAlmostEqual(s["spread"], 0.2)
        self.assertEqual(br.summarize([1.0, 3.0])["median"], 2.0)

    def test_aggregate_medians_and_errors(self):
        runs = [run_of("moe", "xseg", t, p) for t, p in
                ((100.0, 10), (120.0, 30), (90.0, 20), (110.0, 40))]
        runs.append({"workload": "moe", "mode": "xseg", "error": "RuntimeError: boom"})
        row = br.aggregate(runs)
        self.assertEqual(row["throughput"], 105.0)
        self.assertEqual((row["throughput_min"], row["throughput_max"]), (90.0, 120.0))
        self.assertAlmostEqual(row["throughput_spread"], 30.0 / 105.0)
        self.assertEqual(row["peak_device_bytes"], 25)
        self.assertEqual((row["peak_device_min"], row["peak_device_max"]), (10, 40))
        self.assertEqual((row["rounds"], row["rounds_failed"]), (4, 1))
        self.assertEqual(row["round_errors"], ["RuntimeError: boom"])
        self.assertEqual(row["peak_allocated_bytes"], 12.5)
        self.assertNotIn("call_times", row)  # kept in the JSON's runs only
        self.assertNotIn("error", row)
        self.assertEqual(row["output_hash"], "h")

    def test_aggregate_hash_and_failure(self):
        row = br.aggregate([run_of("bert", "native", 1.0, 1, "a"),
                            run_of("bert", "native", 1.0, 1, "b")])
        self.assertEqual(row["output_hash"], "differs between rounds")
        self.assertEqual(row["output_hashes"], ["a", "b"])
        dead = br.aggregate([{"workload": "bert", "mode": "xseg", "error": "x"}] * 2)
        self.assertEqual((dead["rounds"], dead["rounds_failed"], dead["error"]), (0, 2, "x"))


class FigureTest(unittest.TestCase):
    def figure(self, xseg_thr, xseg_peak, native=(1000.0,), expandable=(980.0,),
               exp_peak=(100,)):
        res = results_of({"native": (native, [120]), "expandable": (expandable, exp_peak),
                          "xseg": ((xseg_thr,), (xseg_peak,))})
        return br.compare(res)["llama"]["figure"]["xseg"], res

    def test_throughput_against_the_faster_peer(self):
        f, _ = self.figure(990.0, 100)  # exactly 1% under native, the faster
        self.assertTrue(f["met"])
        self.assertEqual(f["best_peer"], "native")
        self.assertAlmostEqual(f["throughput_vs_best_peer"], 0.99)
        f, _ = self.figure(989.0, 100)
        self.assertFalse(f["met"])
        self.assertFalse(f["throughput_ok"])
        # expandable the faster: measured against it, not native
        f, _ = self.figure(1000.0, 100, expandable=(1005.0,))
        self.assertEqual(f["best_peer"], "expandable")
        self.assertAlmostEqual(f["throughput_vs_best_peer"], 1000.0 / 1005.0)
        self.assertTrue(f["met"])
        f, _ = self.figure(1000.0, 100, expandable=(1020.0,))
        self.assertFalse(f["met"])  # 2% under expandable, though level with native

    def test_memory_against_expandable(self):
        f, _ = self.figure(1000.0, 101)
        self.assertFalse(f["met"])
        self.assertFalse(f["memory_ok"])
        self.assertTrue(f["throughput_ok"])

    def test_medians_not_best_rounds(self):
        # xseg's best round beats native, its median does not
        res = results_of({"native": ([1000.0], [120]), "expandable": ([900.0], [100]),
                          "xseg": ([1100.0, 950.0, 960.0, 1200.0, 900.0], [90])})
        self.assertEqual(res[("llama", "xseg")]["throughput"], 960.0)
        self.assertFalse(br.compare(res)["llama"]["figure"]["xseg"]["met"])

    def test_missing_peer(self):
        res = results_of({"native": ([1000.0], [120]), "xseg": ([1000.0], [90])})
        f = br.compare(res)["llama"]["figure"]["xseg"]
        self.assertIsNone(f["met"])
        self.assertEqual(f["missing"], ["expandable"])
        self.assertIn("missing: expandable", br.summary_line("llama", br.compare(res)["llama"],
                                                             res))

    def test_overall(self):
        good = {"native": ([1000.0], [120]), "expandable": ([990.0], [100]),
                "xseg": ([995.0], [99])}
        res = {}
        for w in ("llama", "gpt2", "moe", "bert"):
            res.update(results_of(good, w))
        o = br.overall(br.compare(res))
        self.assertTrue(o["met"])
        self.assertEqual(o["families"], ["bert", "gpt2", "llama", "moe"])
        self.assertEqual(o["min_rounds"], 5)
        # the graph check is no model family: three families are not enough
        three = {k: v for k, v in res.items() if k[0] != "bert"}
        three.update(results_of(good, "graph"))
        self.assertIsNone(br.overall(br.compare(three))["met"])
        # four rounds are not enough either
        short = {}
        for w in ("llama", "gpt2", "moe", "bert"):
            short.update(results_of(good, w, rounds=4))
        self.assertIsNone(br.overall(br.compare(short))["met"])
        # one family that fails fails the figure
        res.update(results_of(dict(good, xseg=([900.0], [99])), "vit"))
        o = br.overall(br.compare(res))
        self.assertFalse(o["met"])
        self.assertEqual(o["failed"], ["vit"])
        self.assertIn("not met on vit", br.overall_line(o))


class PairedTest(unittest.TestCase):
    def runs(self, rounds):
        """Runs from {round: (native, expandable, xseg)} throughputs; peaks
        100 / 100 / 99 unless a fourth item gives xseg's."""
        out = []
        for rnd, vals in rounds.items():
            for m, thr in zip(br.MODES, vals[:3]):
                peak = (vals[3] if len(vals) > 3 else 99) if m == "xseg" else 100
                out.append({"workload": "llama", "mode": m, "round": rnd,
                            "throughput": thr, "peak_device_bytes": peak})
        return out

    def test_interval_of_the_median(self):
        self.assertEqual(br.median_interval([3, 1, 2, 5, 4]), (1, 5, 0.9375))
        lo, hi, cov = br.median_interval(list(range(1, 10)))
        self.assertEqual((lo, hi), (2, 8))  # 9 values: x(2)..x(8), 96.1%
        self.assertAlmostEqual(cov, 1 - 2 * (1 + 9) / 512)
        lo, hi, cov = br.median_interval(list(range(20)))
        self.assertEqual((lo, hi), (5, 14))
        self.assertGreaterEqual(cov, 0.95)
        self.assertEqual(br.median_interval([7.0]), (7.0, 7.0, 0.0))

    def test_each_round_against_its_own_faster_peer(self):
        # the machine is twice as fast in rounds 3-5: xseg's median over
        # modes is below native's, but it beats the faster peer every round
        rounds = {1: (100, 90, 101), 2: (100, 95, 102), 3: (200, 180, 203),
                  4: (200, 190, 204), 5: (210, 180, 212)}
        p = br.paired(self.runs(rounds))["llama"]
        self.assertEqual(p["rounds"], 5)
        self.assertEqual(p["best_peers"], ["native"] * 5)
        self.assertAlmostEqual(p["median"], 1.015)
        self.assertEqual(p["verdict"], "met")
        self.assertAlmostEqual(p["lo"], 1.0095238, places=6)
        self.assertEqual(p["peak_vs_expandable"], 0.99)

    def test_verdicts(self):
        down = {r: (100, 100, 95 + r * 0.1) for r in range(1, 6)}
        self.assertEqual(br.paired(self.runs(down))["llama"]["verdict"], "not met")
        noisy = {1: (100, 90, 80), 2: (100, 90, 120), 3: (100, 90, 99), 4: (100, 90, 100),
                 5: (100, 90, 105)}
        p = br.paired(self.runs(noisy))["llama"]
        self.assertEqual(p["verdict"], "undecided")
        self.assertIn("UNDECIDED", br.paired_line("llama", p))
        self.assertIn("93.8% interval 0.800..1.200", br.paired_line("llama", p))
        # exactly 1% under the faster peer in every round is met, as in figure_for
        edge = {r: (100, 100, 99) for r in range(1, 6)}
        self.assertEqual(br.paired(self.runs(edge))["llama"]["verdict"], "met")

    def test_rounds_without_every_mode_do_not_count(self):
        runs = self.runs({1: (100, 90, 101), 2: (100, 90, 50), 3: (100, 90, 102)})
        runs[4]["error"] = "boom"  # round 2's expandable failed
        del runs[4]["throughput"]
        runs.append({"workload": "llama", "mode": "xseg", "round": 4, "throughput": 1.0,
                     "peak_device_bytes": 1})  # no peers in round 4
        p = br.paired(runs)["llama"]
        self.assertEqual(p["rounds"], 2)
        self.assertEqual(sorted(p["ratios"]), [1.01, 1.02])
        self.assertEqual(br.paired(runs, "xseg-native"), {})
        everything = br.paired_all(runs + [dict(runs[2], mode="xseg[premap:off]")])
        self.assertEqual(sorted(everything), ["xseg", "xseg[premap:off]"])


class OutputsTest(unittest.TestCase):
    def rows(self, **hashes):
        return {m: {"output_hashes": list(h)} for m, h in hashes.items()}

    def test_cases(self):
        same = self.rows(native="aa", expandable="aa", xseg="aa")
        self.assertEqual(br.outputs_verdict(same, True), (True, ""))
        self.assertIsNone(br.outputs_verdict(self.rows(native="aa", xseg="aa"), False)[0])
        self.assertFalse(br.outputs_verdict(self.rows(native="aa", expandable="aa",
                                                      xseg="bb"), True)[0])
        # only xseg varies between its rounds: xseg's fault
        v, note = br.outputs_verdict(self.rows(native="aa", expandable="aa", xseg="ab"), True)
        self.assertFalse(v)
        self.assertIn("xseg vary", note)
        # a PyTorch mode varies too: the workload is not deterministic
        v, note = br.outputs_verdict(self.rows(native="ab", expandable="aa", xseg="ab"), True)
        self.assertIsNone(v)
        self.assertIn("nondeterministic", note)


class TableTest(unittest.TestCase):
    def test_table_summary_markdown(self):
        res = results_of({"native": ([1000.0, 900.0, 1100.0], [120]),
                          "expandable": ([990.0], [100]), "xseg": ([1005.0], [2 << 30])})
        verdict = br.compare(res)
        text = br.table(res, verdict)
        xrow = next(line for line in text.splitlines() if line.split()[:2] == ["llama", "xseg"])
        self.assertIn("2.000", xrow)  # median peak in GiB
        nrow = next(line for line in text.splitlines()
                    if line.split()[:2] == ["llama", "native"])
        self.assertIn("900.0..1100.0 (20.0%)", nrow)
        self.assertIn("    5 ", nrow)  # rounds
        line = br.summary(res, verdict)[0]
        self.assertTrue(line.startswith("llama: figure NOT MET: xseg 1005.0 vs native 1000.0"))
        self.assertIn("+0.50%", line)
        self.assertIn(">: NO", line)  # 2 GiB is more than expandable's
        md = br.markdown(res, verdict).splitlines()
        self.assertEqual(len(md), 2 + 3)
        self.assertIn("| llama | xseg | 5 | 2.000 |", md[4])
        self.assertEqual(text.splitlines()[-1], "figure (xseg): NOT MET on 1 family (llama), "
                                                ">= 5 rounds each; not met on llama")


class WorkloadsTest(unittest.TestCase):
    def test_every_workload_runs(self):
        self.assertEqual(sorted(bm.RUNNERS), sorted(br.WORKLOADS))
        self.assertGreaterEqual(len(br.FAMILIES), br.FIGURE_MIN_FAMILIES)
        self.assertTrue(set(br.FAMILIES) <= set(br.WORKLOADS) - {"graph", "probe"})

    def test_schedules_fit_their_configs(self):
        for sched in (bm.LLAMA_CALLS, bm.LLAMA_QUICK):
            self.assertTrue(all(p + n <= bm.MAX_POSITIONS["llama"] for _, p, n in sched))
        for name, scheds in (("gpt2", (bm.GPT2_STEPS, bm.GPT2_QUICK)),
                             ("moe", (bm.MOE_STEPS, bm.MOE_QUICK)),
                             ("bert", (bm.BERT_CALLS, bm.BERT_QUICK))):
            for sched in scheds:
                self.assertTrue(all(s <= bm.MAX_POSITIONS[name] for _, s in sched), name)
        for sched in (bm.VIT_STEPS, bm.VIT_QUICK):
            self.assertTrue(all(side % bm.VIT_PATCH == 0 for _, side in sched))
            self.assertGreater(len({side for _, side in sched}), 3)  # resolutions vary
        # quick schedules are shorter, and vary batch and length all the same
        for full, quick in ((bm.LLAMA_CALLS, bm.LLAMA_QUICK), (bm.GPT2_STEPS, bm.GPT2_QUICK),
                            (bm.MOE_STEPS, bm.MOE_QUICK), (bm.BERT_CALLS, bm.BERT_QUICK),
                            (bm.VIT_STEPS, bm.VIT_QUICK)):
            self.assertLess(len(quick), len(full))
            self.assertGreater(len({c[0] for c in quick}), 2)
            self.assertGreater(len({c[1] for c in quick}), 2)


FAKE_TORCH = 'raise ImportError("fake torch of test_bench: no torch here")\n'


class PlumbingTest(unittest.TestCase):
    """The parent and its children with a torch that cannot be imported:
    every run fails at set-up, which shows the jobs, the grouping and the
    JSON without a GPU."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        os.makedirs(os.path.join(self.tmp.name, "torch"))
        with open(os.path.join(self.tmp.name, "torch", "__init__.py"), "w") as f:
            f.write(FAKE_TORCH)
        self.env = mock.patch.dict(os.environ, {"PYTHONPATH": self.tmp.name})
        self.env.start()

    def tearDown(self):
        self.env.stop()
        self.tmp.cleanup()

    def run_parent(self, *argv):
        out = os.path.join(self.tmp.name, "out.json")
        args = bm.parse(list(argv) + ["--out", out])
        with contextlib.redirect_stdout(io.StringIO()) as text:
            rc = bm.parent(args)
        with open(out) as f:
            return rc, json.load(f), text.getvalue()

    def test_one_process_per_mode_and_round(self):
        rc, doc, text = self.run_parent("--workloads", "llama", "bert", "--modes", "native",
                                        "xseg", "--rounds", "2", "--per-process", "round",
                                        "--quick")
        self.assertEqual(rc, 1)
        self.assertEqual(doc["progress"]["rounds_done"], 2)
        self.assertEqual(len(doc["runs"]), 8)  # 2 rounds x 2 modes x 2 workloads
        for r in doc["runs"]:
            self.assertIn("fake torch of test_bench", r["error"])
            self.assertEqual(r["returncode"], 1)
            # both workloads went to one subprocess, in the round's order
            order = ["llama", "bert"] if r["round"] == 1 else ["bert", "llama"]
            self.assertEqual(r["workloads_in_process"], order)
        rows = {(r["workload"], r["mode"]): r for r in doc["results"]}
        self.assertEqual(rows[("bert", "xseg")]["rounds_failed"], 2)
        self.assertIn("ERROR: ImportError: fake torch", text)
        self.assertEqual(doc["per_process"], "round")
        self.assertTrue(doc["quick"])
        self.assertIsNone(doc["figure"]["met"])  # nothing measured: not proven
        self.assertEqual(doc["paired"], {"xseg": {}})  # no round to pair
        # bench_report.py prints the same table from the saved JSON
        path = os.path.join(self.tmp.name, "out.json")
        with contextlib.redirect_stdout(io.StringIO()) as again:
            self.assertEqual(br.main([path]), 0)
        self.assertIn("bert     xseg       ERROR: ImportError: fake torch", again.getvalue())

    def test_one_process_per_workload(self):
        rc, doc, _ = self.run_parent("--workloads", "gpt2", "vit", "--modes", "expandable",
                                     "--rounds", "1")
        self.assertEqual(rc, 1)
        self.assertEqual([r["workloads_in_process"] for r in doc["runs"]],
                         [["gpt2"], ["vit"]])

    def test_budget_spent(self):
        rc, doc, text = self.run_parent("--workloads", "moe", "--modes", "xseg",
                                        "--budget", "1")
        self.assertEqual(rc, 1)
        self.assertEqual(doc["runs"][0]["error"], "skipped: the budget was spent")
        self.assertEqual(doc["progress"]["skipped_jobs"][0]["workloads"], ["moe"])
        self.assertIn("skipped", text)

    def test_timeout_keeps_the_job_apart(self):
        args = bm.parse(["--quick"])
        res = bm.run_job(args, "native", ["llama", "moe"], 0.001)
        self.assertEqual([r["workload"] for r in res], ["llama", "moe"])
        for r in res:
            self.assertEqual(r["returncode"], "timeout")
            self.assertEqual(r["error"], "not finished: subprocess ended with timeout")

    def test_trace_needs_one_workload_per_process(self):
        with contextlib.redirect_stderr(io.StringIO()):
            with self.assertRaises(SystemExit):
                bm.parse(["--trace-dir", "t", "--per-process", "round"])
        self.assertEqual(bm.parse(["--trace-dir", "t"]).trace_dir, "t")


if __name__ == "__main__":
    unittest.main()
