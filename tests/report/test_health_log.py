"""Run health end to end on a hand-written log shaped like a real Megatron-LM one (checkpoint save, NCCL
watchdog timeout, relaunch from the checkpoint), with every expected number worked out by hand below."""

import json
from datetime import datetime, timedelta

import pytest
from tests.support import run_main  # the CLI entry point in-process (same exit statuses, one-line errors)

T0 = datetime(2024, 6, 1, 10, 0, 0)


def _it(seconds_after_t0: float, it: int) -> str:
    ts = (T0 + timedelta(seconds=seconds_after_t0)).strftime("%Y-%m-%d %H:%M:%S")
    return (f" [{ts}] iteration {it:>8}/     100 | consumed samples: {16 * it:>12} | elapsed time per iteration (ms): "
            "1000.0 | learning rate: 1.000000E-05 | global batch size:    16 | lm loss: 2.500000E+00 | loss scale: 1.0 "
            "| grad norm: 1.000 | number of skipped iterations:   0 | number of nan iterations:   0 |")


def _log() -> str:
    lines = ["using world size: 8, data-parallel size: 8, context-parallel size: 1, tensor-model-parallel size: 1, "
             "pipeline-model-parallel size: 1",
             "training ..."]
    lines += [_it(10 * k, 10 * k) for k in (1, 2, 3, 4)]  # 10 iterations of 1 s per line
    lines += ["saving checkpoint at iteration      40 to /ckpt in torch_dist format",
              "  successfully saved checkpoint from iteration      40 to /ckpt [ t 1/1, p 1/1 ]"]
    lines += [_it(95, 50), _it(105, 60)]  # the save took 45 s outside the step timer
    lines += [f"[rank{r}]:[E601 10:11:45.185053341 ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught collective "
              "operation timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) "
              "ran for 600013 milliseconds before timing out." for r in range(2)]
    lines += ["Traceback (most recent call last):", '  File "pretrain_gpt.py", line 1, in <module>',
              "RuntimeError: NCCL communicator was aborted"]
    lines += ["  successfully loaded checkpoint from /ckpt [ t 1/1, p 1/1 ] at iteration 40"]
    lines += [_it(930, 50), _it(940, 60), _it(950, 70), _it(960, 80)]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def health(tmp_path_factory):
    run = tmp_path_factory.mktemp("watchdog")
    (run / "train.log").write_text(_log())
    (run / "run.yaml").write_text("model: qwen2.5-vl-7b\nnum_gpus: 8\ngpu: H100-SXM\nseq_length: 4096\n"
                                  "global_batch_size: 16\nimage_grid: [1, 32, 32]\n")
    out = run / "out"
    r = run_main("report", run, "-o", out)
    assert r.returncode == 0, r.stderr
    return json.loads((out / "summary.json").read_text()), (out / "report.md").read_text()


def test_wall_clock_and_losses_by_hand(health):
    h, _ = health
    h = h["health"]
    assert h["segments"] == 2
    assert h["wall_clock_s"] == pytest.approx(960)  # first window starts at T0, last line at T0 + 960 s
    # segment 0's last line at +105; segment 1's first window (iterations 41..50, 10 s) starts at +920
    assert h["restart_downtime_s"] == pytest.approx(920 - 105)
    assert h["untimed_s"] == pytest.approx(45)  # the checkpoint save between iterations 40 and 50
    assert h["trained_s"] == pytest.approx(10 * 10)  # 10 windows of 10 s
    assert h["replayed_iterations"] == 20 and h["replayed_s"] == pytest.approx(20)  # 41..60 redone
    assert h["productive_s"] == pytest.approx(80) and h["goodput"] == pytest.approx(80 / 960)
    assert h["log_events"]["checkpoint"] >= 2 and h["log_events"]["traceback"] >= 1
    assert h["tokens_per_s_per_gpu"] == pytest.approx(16 * 4096 / 8)  # 16 x 4096 tokens per 1 s iteration, 8 GPUs


def test_report_names_the_lost_minutes(health):
    s, md = health
    assert "Goodput **8.3%**" in md and "restart downtime 13.6 min" in md
    assert "restart after iteration 60" in md and "untimed between iterations 40 and 50" in md
    assert s["figures"]["timeline.png"] == "drawn"
