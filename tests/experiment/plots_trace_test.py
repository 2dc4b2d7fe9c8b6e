"""The timeline plot's data extraction (tools/experiment/plots_trace.py) on a
small hand-made trace.json, and the PNG it draws."""
import json
import unittest

from helpers import TempDir

from experiment.plots_trace import TraceDataError, extract_step, load_trace, plot_trace_step


def meta(pid, name, tid=0, what="process_name"):
    return {"ph": "M", "pid": pid, "tid": tid, "name": what, "args": {"name": name}}


def span(pid, tid, name, ts, dur, **args):
    return {"ph": "X", "pid": pid, "tid": tid, "name": name, "cat": "t", "ts": ts, "dur": dur, "args": args}


def two_worker_trace():
    """Scheduler, one server and two workers; steps 0..2, each 1000 µs apart."""
    events = [meta(1, "scheduler"), meta(2, "server 0"), meta(2, "requests", 1, "thread_name"),
              meta(3, "worker 0"), meta(3, "training", 1, "thread_name"),
              meta(3, "chunks <-> server 0", 2, "thread_name"),
              meta(4, "worker 1"), meta(4, "training", 1, "thread_name"),
              span(1, 1, "job", 0, 10000)]
    for step in range(3):
        t0 = 1000 * step
        for pid, skew in ((3, 0), (4, 50)):
            events += [span(pid, 1, "step", t0 + skew, 800, step=step),
                       span(pid, 1, "pull wait", t0 + skew, 100),
                       span(pid, 1, "forward+backward", t0 + skew + 100, 600),
                       span(pid, 1, "push send", t0 + skew + 300, 20)]
        events.append(span(3, 2, "push", t0 + 400, 300, chunk=0, server=0))
        events.append(span(2, 1, "push", t0 + 500, 40, chunk=0, worker=0))
        events.append(span(2, 1, "update", t0 + 510, 20))
    return {"traceEvents": events, "displayTimeUnit": "ms"}


class ExtractStepTest(unittest.TestCase):
    def test_middle_step_window_rows_and_depths(self):
        view = extract_step(two_worker_trace(), pad=0.0)
        self.assertEqual(view.step, 1)
        self.assertEqual(view.window_us, (1000, 1850))  # worker 0's start to worker 1's end
        labels = [r.label for r in view.rows]
        self.assertEqual(labels, ["worker 0: training", "worker 0: chunks <-> server 0", "worker 1: training",
                                  "server 0: requests"])  # workers first; the scheduler left out
        training = view.rows[0].bars
        self.assertEqual([(b.name, b.depth) for b in training],
                         [("step", 0), ("pull wait", 1), ("forward+backward", 1), ("push send", 2)])
        fb = training[2]
        self.assertAlmostEqual(fb.start_ms, 0.1)
        self.assertAlmostEqual(fb.dur_ms, 0.6)
        server = view.rows[3].bars
        self.assertEqual([(b.name, b.depth) for b in server], [("push", 0), ("update", 1)])

    def test_chosen_step_and_clipping_to_the_window(self):
        view = extract_step(two_worker_trace(), step=2, pad=0.0)
        self.assertEqual(view.window_us, (2000, 2850))
        for row in view.rows:
            for b in row.bars:
                self.assertGreaterEqual(b.start_ms, 0.0)
                self.assertLessEqual(b.start_ms + b.dur_ms, 0.85 + 1e-9)
        with self.assertRaises(TraceDataError):
            extract_step(two_worker_trace(), step=7)

    def test_a_step_missing_on_one_worker_is_not_chosen(self):
        trace = two_worker_trace()
        trace["traceEvents"] = [e for e in trace["traceEvents"]
                                if not (e.get("pid") == 4 and e.get("args", {}).get("step") == 1)]
        self.assertIn(extract_step(trace).step, (0, 2))

    def test_the_default_step_is_typical_not_an_evaluation_or_an_outlier(self):
        # Seven steps: the middle one (3) holds worker 0's evaluation, step 1 is four times as
        # long as the rest; the first and last are start-up and the end. Before, the middle
        # step was shown: the evaluation.
        events = [meta(3, "worker 0"), meta(3, "training", 1, "thread_name"),
                  meta(4, "worker 1"), meta(4, "training", 1, "thread_name")]
        for step in range(7):
            t0, dur = 10000 * step, (3200 if step == 1 else 800)
            for pid in (3, 4):
                events.append(span(pid, 1, "step", t0, dur, step=step))
                events.append(span(pid, 1, "forward+backward", t0 + 100, dur - 200))
            if step == 3:
                events.append(span(3, 1, "eval", t0 + 500, 200))
        view = extract_step({"traceEvents": events})
        self.assertIn(view.step, (2, 4, 5))
        self.assertEqual(view.step, 4)  # lengths 800 (steps 2, 4, 5) and 3200 (1): the lower median, step 4

    def test_no_steps_is_a_clear_error(self):
        with self.assertRaisesRegex(TraceDataError, "no step recorded by every worker"):
            extract_step({"traceEvents": [meta(1, "scheduler"), span(1, 1, "job", 0, 10)]})


class PlotTest(unittest.TestCase):
    def setUp(self):
        self.tmp = TempDir()

    def tearDown(self):
        self.tmp.cleanup()

    def test_png_written_and_bad_files_give_none(self):
        trace_json = self.tmp.path / "trace.json"
        trace_json.write_text(json.dumps(two_worker_trace()), encoding="utf-8")
        png = plot_trace_step(trace_json, self.tmp.path / "trace_step.png")
        self.assertIsNotNone(png)
        self.assertEqual(png.read_bytes()[:8], b"\x89PNG\r\n\x1a\n")
        broken = self.tmp.path / "broken.json"
        broken.write_text('{"traceEvents": [', encoding="utf-8")
        with self.assertRaises(TraceDataError):
            load_trace(broken)
        self.assertIsNone(plot_trace_step(broken, self.tmp.path / "x.png"))


if __name__ == "__main__":
    unittest.main()
