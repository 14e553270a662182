"""Dask backend: per-partition single-machine code, merged by the single pass's own finish == the single-machine
path, exactly. ONE metadata reader: `aggregate_metadata_dask` forwards to `vlm_perf.scale.cluster.read_metadata`."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path
from types import SimpleNamespace

import polars as pl
import pytest

pytest.importorskip("dask")
distributed = pytest.importorskip("distributed")

from mixed_logs import mline
from vlm_perf.ingest.logs import parse_logs
from vlm_perf.ingest.metadata import iteration_stats
from vlm_perf.scale import aggregate_metadata_dask, parse_logs_dask, plan_partitions


@pytest.fixture(scope="module")
def client():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None,
                                  silence_logs=40) as cluster, distributed.Client(cluster) as c:
        yield c


def _row(rng: random.Random, it: int, mb: int, rank: int) -> dict:
    row: dict = {"iteration": it, "microbatch": mb, "dp_rank": rank}
    kind = rng.random()
    if kind < 0.1:  # pre-aggregated LM and vision
        row.update(lm_tokens=rng.randint(10, 4000), lm_tokens_sq=rng.randint(10**4, 10**7), lm_sequences=3,
                   vision_patches=64, vision_patches_sq=2048, vision_merged_tokens=16, vision_items=1)
    elif kind < 0.15:  # padded_tokens only
        row.update(padded_tokens=rng.randint(1, 8) * 1024, samples=rng.randint(1, 4))
    else:
        seq = [rng.randint(1, 3000) for _ in range(rng.randint(1, 6))]
        row.update(seq_lens=seq, padded_tokens=(sum(seq) // 1024 + 1) * 1024)
        if rng.random() < 0.5:
            row["image_grid_thw"] = [[1, 2 * rng.randint(1, 40), 2 * rng.randint(1, 40)]
                                     for _ in range(rng.randint(1, 3))]
        if rng.random() < 0.2:
            row["video_grid_thw"] = [[rng.randint(1, 16), 2 * rng.randint(1, 20), 2 * rng.randint(1, 20)]]
        # the first sequence holds the merged visual tokens (merge 2): an LM sequence counts every placeholder
        seq[0] += sum(t * (h // 2) * (w // 2) for t, h, w in row.get("image_grid_thw", []) + row.get("video_grid_thw", []))
        row["padded_tokens"] = (sum(seq) // 1024 + 1) * 1024
    return row


def write_shards(root: Path, ranks: int = 6, iterations: int = 40, mbs: int = 3, seed: int = 0,
                 gz_every: int = 3) -> Path:
    """Per-rank shards (every rank has every iteration, so partitions overlap in iterations)."""
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    for rank in range(ranks):
        lines = [json.dumps(_row(rng, it, mb, rank)) for it in range(iterations) for mb in range(mbs)]
        text = "\n".join(lines) + "\n"
        if gz_every and rank % gz_every == gz_every - 1:
            with gzip.open(root / f"metadata-rank{rank:05d}.jsonl.gz", "wt") as fh:
                fh.write(text)
        else:
            (root / f"metadata-rank{rank:05d}.jsonl").write_text(text)
    return root


def _same(a, b) -> None:
    assert a.frame.equals(b.frame)
    assert a.frame.schema == b.frame.schema
    assert a.diagnostics.to_dict() == b.diagnostics.to_dict()


@pytest.mark.parametrize("fpp,partition_bytes", [(1, None), (2, None), (None, None), (None, 1)])
def test_metadata_bit_identical(tmp_path, client, fpp, partition_bytes):
    d = write_shards(tmp_path / "md")
    spec = SimpleNamespace(vision=SimpleNamespace(spatial_merge_size=2, window_side_merged=4))
    ref = iteration_stats(d, spec=spec)
    got = aggregate_metadata_dask(d, spec=spec, client=client, files_per_partition=fpp, partition_bytes=partition_bytes)
    _same(got, ref)
    assert got.frame["iteration"].is_sorted() and got.diagnostics.rows_used == 6 * 40 * 3
    assert all(dt == pl.Int64 for dt in got.frame.schema.values())
    assert got.diagnostics.decompressed and got.diagnostics.notes == ref.diagnostics.notes != []


def test_metadata_glob_and_default_scheduler(tmp_path):
    d = write_shards(tmp_path / "md", ranks=3, gz_every=0)
    pattern = str(d / "*.jsonl")
    _same(aggregate_metadata_dask(pattern, files_per_partition=1), iteration_stats(pattern))


def _with_bad_lines(tmp_path: Path) -> Path:
    d = write_shards(tmp_path / "bad", ranks=5, iterations=10, mbs=2, gz_every=0)
    f1 = d / "metadata-rank00001.jsonl"
    lines = f1.read_text().splitlines()
    lines[3] = json.dumps({"iteration": 2, "seq_lens": [10], "image_grid_thw": [[1, 3, 4]]})  # h not divisible
    f1.write_text("\n".join(lines) + "\n")
    f3 = d / "metadata-rank00003.jsonl"
    lines = f3.read_text().splitlines()
    lines[0] = "{not json"  # polars cannot parse: repair (slow) path
    lines[5] = json.dumps({"iteration": "seven", "seq_lens": [1]})
    lines[7] = json.dumps({"iteration": -1, "seq_lens": [1]})
    f3.write_text("\n".join(lines) + "\n")
    return d


def test_metadata_bad_lines_consistent(tmp_path, client):
    d = _with_bad_lines(tmp_path)
    with pytest.raises(ValueError) as ref_err:
        iteration_stats(d)
    for fpp in (1, 2, 5):
        with pytest.raises(ValueError) as err:
            aggregate_metadata_dask(d, client=client, files_per_partition=fpp)
        assert str(err.value) == str(ref_err.value)
        assert "rank00001.jsonl:4" in str(err.value)
        got = aggregate_metadata_dask(d, client=client, skip_bad=True, files_per_partition=fpp)
        ref = iteration_stats(d, skip_bad=True)
        _same(got, ref)
        assert got.diagnostics.rows_skipped_total == 4 and len(got.diagnostics.bad_lines) == 4


def test_metadata_missing_input_and_partition_plan(tmp_path):
    with pytest.raises(ValueError, match="no such file"):
        aggregate_metadata_dask(tmp_path / "nope.jsonl")
    d = write_shards(tmp_path / "md", ranks=5, gz_every=0)
    files = sorted(str(p) for p in d.iterdir())
    assert plan_partitions(files, 2) == [files[0:2], files[2:4], files[4:]]
    assert plan_partitions(files, partition_bytes=1) == [[f] for f in files]
    assert plan_partitions(files, partition_bytes=1 << 40) == [files]


# ------------------------------------------------------------------------------------- logs
BANNER = "successfully loaded checkpoint from /ckpt [ t 1/1, p 1/1 ] at iteration {}"


def _log_files(tmp_path: Path) -> list[Path]:
    files = {
        # two ranks print every iteration; a restart inside the file (banner, steps back)
        "a.log": ["[default0]:  log_interval .................................... 10", "noise line"]
        + [mline(i, 3.0 - i / 100, p) for i in (10, 20, 30) for p in ("[default0]:", "[default1]:")]
        + [BANNER.format(20)] + [mline(i, 2.0 - i / 100) for i in (30, 40)],
        # new attempt in a new file, banner before the first record, no step back (resumed at 40)
        "b.log": ["[launcher] restart", BANNER.format(40), mline(50, 1.5), mline(60, 1.4), "Traceback (most recent call last):"],
        # steps back across files without a banner; ends with a banner (next file: new segment)
        "c.log": [mline(55, 1.3), mline(60, 1.2), mline(70, 1.1), BANNER.format(70)],
        "d.log": [mline(80, 1.0), "{'loss': 1.5, 'learning_rate': 1e-05, 'epoch'"],
    }
    out = []
    for name, lines in files.items():
        p = tmp_path / name
        p.write_text("\n".join(lines) + "\n")
        out.append(p)
    gz = tmp_path / "e.log.gz"
    with gzip.open(gz, "wt") as fh:
        fh.write("\n".join([mline(80, 0.9), mline(90, 0.8)]) + "\n")
    out.append(gz)
    return out


def test_logs_same_as_parse_logs(tmp_path, client):
    files = _log_files(tmp_path)
    ref = parse_logs(files)
    got = parse_logs_dask(files, client=client)
    assert got.raw.equals(ref.raw)
    assert got.raw.columns == ref.raw.columns
    assert got.iterations.equals(ref.iterations)
    assert got.deduplicated.equals(ref.deduplicated)
    assert got.diagnostics.to_dict() == ref.diagnostics.to_dict()
    assert got.run_config == ref.run_config
    assert ref.diagnostics.segments == 5  # the case is not trivial: in-file, head, cross-file, tail restarts


def test_logs_sample_run_split_per_attempt(tmp_path, client):
    src = Path(__file__).resolve().parents[2] / "sample_logs" / "qwen3-vl-30b-a3b-sft" / "train.log"
    lines = src.read_text().splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if "(attempt 2)" in line)
    a, b = tmp_path / "attempt1.log", tmp_path / "attempt2.log"
    a.write_text("".join(lines[:cut]))
    b.write_text("".join(lines[cut:]))
    ref = parse_logs([a, b])
    got = parse_logs_dask([a, b], client=client)
    assert got.raw.equals(ref.raw) and got.iterations.equals(ref.iterations)
    assert got.diagnostics.to_dict() == ref.diagnostics.to_dict()


def test_logs_errors_in_file_order(tmp_path, client):
    empty = tmp_path / "empty.log"
    empty.write_text("nothing here\n")
    good = _log_files(tmp_path)[0]
    # a record-less log among several (an NCCL / launcher log) is skipped with a note, the same way
    # on both paths (issue 9: it used to be fatal)
    ref = parse_logs([good, empty])
    got = parse_logs_dask([good, empty], client=client)
    assert got.raw.equals(ref.raw)
    assert got.diagnostics.to_dict() == ref.diagnostics.to_dict()
    assert any("empty.log: skipped" in n for n in got.diagnostics.notes)
    with pytest.raises(ValueError) as ref_err:
        parse_logs([empty, empty])
    with pytest.raises(ValueError) as err:
        parse_logs_dask([empty, empty], client=client)
    assert str(err.value) == str(ref_err.value)
    with pytest.raises(ValueError, match="not found"):
        parse_logs_dask([tmp_path / "missing.log"], client=client)


def test_metadata_from_fsspec_urls(tmp_path, client):
    """Object-store style input: shards behind URLs are staged per task; names stay the URLs."""
    fsspec = pytest.importorskip("fsspec")
    d = _with_bad_lines(tmp_path)
    fs = fsspec.filesystem("memory")
    for p in sorted(d.iterdir()):
        fs.pipe(f"/vlm-perf-test/md/{p.name}", p.read_bytes())
    try:
        with pytest.raises(ValueError, match=r"^memory:///?vlm-perf-test/md/metadata-rank00001.jsonl:4: "):
            aggregate_metadata_dask("memory://vlm-perf-test/md/*.jsonl", client=client, files_per_partition=2)
        got = aggregate_metadata_dask("memory://vlm-perf-test/md", client=client, skip_bad=True, files_per_partition=2)
        ref = iteration_stats(d, skip_bad=True)
        assert got.frame.equals(ref.frame)
        assert got.diagnostics.rows_skipped == ref.diagnostics.rows_skipped
        assert [s.split("md/", 1)[1] for s in got.diagnostics.bad_lines] == \
               [s.rsplit("/", 1)[1] for s in ref.diagnostics.bad_lines]
        assert all(f.startswith("memory://") for f in got.diagnostics.files + got.diagnostics.cleaned)
    finally:
        fs.rm("/vlm-perf-test", recursive=True)


def test_auto_partition_size_keeps_workers_busy():
    from vlm_perf.scale.cluster import DEFAULT_PARTITION_BYTES, MIN_PARTITION_BYTES, auto_partition_bytes

    class FakeClient:
        def nthreads(self):
            return {"w1": 2, "w2": 2}

    gb = 1 << 30
    assert auto_partition_bytes([gb] * 4, FakeClient()) == gb * 4 // 16  # 4 threads x 4 tasks
    assert auto_partition_bytes([100 << 30], FakeClient()) == DEFAULT_PARTITION_BYTES
    assert auto_partition_bytes([1 << 20], FakeClient()) == MIN_PARTITION_BYTES


@pytest.mark.parametrize("fpp", [1, None])
def test_per_rank_bit_identical(tmp_path, client, fpp):
    """Per-(iteration, dp_rank) statistics: the Dask map + merge equals the single pass."""
    from vlm_perf.ingest.metadata_source import MetadataSource

    d = write_shards(tmp_path / "md")
    ref = MetadataSource(d, per_rank=True).read()
    got = aggregate_metadata_dask(d, client=client, files_per_partition=fpp, per_rank=True)
    assert got.per_rank.equals(ref.per_rank) and got.per_rank.schema == ref.per_rank.schema
    assert got.frame.equals(ref.per_iteration)
    assert aggregate_metadata_dask(d, client=client, files_per_partition=fpp).per_rank is None


@pytest.mark.parametrize("fpp", [1, 2, None])
def test_one_metadata_reader_whatever_the_entry_point(tmp_path, client, fpp):
    """`aggregate_metadata_dask` (the library's) and `read_metadata` (the one `--scheduler` uses) are one reader:
    with a cluster, with the default client, and with no client at all (the partitions read in this process), the
    frame, the per-rank frame and the diagnostics are the same objects' values as the single pass's."""
    from vlm_perf.ingest.metadata_source import MetadataSource
    from vlm_perf.scale import cluster

    d = _with_bad_lines(tmp_path)
    ref = MetadataSource(d, skip_bad=True, per_rank=True).read()
    on_cluster = cluster.read_metadata(client, d, skip_bad=True, per_rank=True, files_per_partition=fpp)
    in_process = cluster.read_metadata(None, d, skip_bad=True, per_rank=True, files_per_partition=fpp)
    library = aggregate_metadata_dask(d, client=client, skip_bad=True, per_rank=True, files_per_partition=fpp)
    for got in (on_cluster, in_process):
        assert got.per_iteration.equals(ref.per_iteration) and got.per_rank.equals(ref.per_rank)
        assert got.diagnostics.to_dict() == ref.diagnostics.to_dict()
    assert library.frame.equals(ref.per_iteration) and library.per_rank.equals(ref.per_rank)
    assert library.diagnostics.to_dict() == ref.diagnostics.to_dict()
    import vlm_perf.scale.dask_backend as backend

    assert not hasattr(backend, "_metadata_partial")  # no second map task, no second merge


# ---------------------------------------------- logs: the same map + combine as parse_logs
def _same_parse(got, ref) -> None:
    assert got.raw.equals(ref.raw) and got.raw.schema == ref.raw.schema
    assert got.deduplicated.equals(ref.deduplicated) and got.iterations.equals(ref.iterations)
    assert got.diagnostics.to_dict() == ref.diagnostics.to_dict()  # notes, capped lists included
    assert got.run_config == ref.run_config


@pytest.mark.parametrize("order", ["as given", "reversed"])
@pytest.mark.parametrize("split_every", [None, 2, 3])
def test_logs_mixed_run_bit_identical(tmp_path, client, order, split_every):
    """Restarts (banners at a file's top, middle and end; step-backs across files), replays,
    a hard-wrapped record, six formats, failed / partial / undecodable lines, a record-less file."""
    from mixed_logs import write_run

    files = write_run(tmp_path / "run")
    if order == "reversed":
        files = files[::-1]
    ref = parse_logs(files)
    got = parse_logs_dask(files, client=client, split_every=split_every)
    _same_parse(got, ref)
    assert ref.diagnostics.segments >= 8 and ref.diagnostics.failed_count and ref.diagnostics.partial_count


def test_logs_capped_locations_identical(tmp_path, client, monkeypatch):
    """With the location lists capped at 1 entry the first failed / partial line and the first
    note in file order survive on both paths (the workers run in this process: threads)."""
    from mixed_logs import write_run

    from vlm_perf.ingest.logs import diagnostics

    monkeypatch.setattr(diagnostics, "MAX_LOCATIONS", 1)
    files = write_run(tmp_path / "run")
    ref = parse_logs(files)
    assert len(ref.diagnostics.notes) == 1 and ref.diagnostics.failed_count == 2
    for split_every in (None, 2):
        _same_parse(parse_logs_dask(files, client=client, split_every=split_every), ref)


def test_logs_error_is_the_first_in_file_order(tmp_path, client):
    """Errors found by the map (a missing file, a truncated .gz) travel as data: the one raised is
    the first in file order, as the sequential parse raises it, whichever task failed first."""
    from mixed_logs import write_run

    files = write_run(tmp_path / "run")
    data = gzip.compress(("\n".join(mline(i, 1.0) for i in range(1, 4000)) + "\n").encode())
    cut = tmp_path / "cut.log.gz"
    cut.write_bytes(data[: len(data) // 2])  # a truncated download
    missing = tmp_path / "missing.log"
    for bad in ([files[0], missing, *files[1:], cut], [*files[:3], cut, missing]):
        with pytest.raises(ValueError) as ref_err:
            parse_logs(bad)
        for split_every in (None, 2):
            with pytest.raises(ValueError) as err:
                parse_logs_dask(bad, client=client, split_every=split_every)
            assert str(err.value) == str(ref_err.value)
            assert str(bad[1] if bad[1] == missing else cut) in str(err.value)
    no_events = tmp_path / "tb"  # a directory without logs: raised before any task, as parse_logs
    no_events.mkdir()
    with pytest.raises(ValueError, match="no training log found"):
        parse_logs_dask([files[0], no_events], client=client)
    with pytest.raises(ValueError, match="unknown format 'bogus'"):
        parse_logs_dask(files, format="bogus", client=client)


def test_logs_format_filter_identical(tmp_path, client):
    from mixed_logs import write_run

    files = write_run(tmp_path / "run")
    for fmt in ("megatron", "hf", "nemo2"):
        _same_parse(parse_logs_dask(files, format=fmt, client=client), parse_logs(files, format=fmt))
