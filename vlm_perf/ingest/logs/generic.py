"""The generic extractor: the step and the key/value pairs of any common metrics line, mapped through
the vocabulary (``vocab.lookup``).

It runs last in the router, on lines no format claimed, and turns a line into a record when it finds
a **step** and at least one **known training metric** (loss, lr, grad norm, step time, TFLOP/s, MFU,
tokens/s) or, for an evaluation, at least one evaluation metric. Such records get ``framework =
"generic"`` (a lower confidence than a declared format; each file says how many lines only the
generic path read) unless a declared shape (``SHAPES``: nanochat, xtuner/mmengine, Composer, ...)
recognised the line, whose name is then the framework.

Step shapes, first match wins (``find_step``):

* mmengine / xtuner ``Iter(train) [ 10/5705]`` (``Iter(val)``: an evaluation) and ``Epoch(train)
  [2][ 10/500]`` (iteration = (epoch - 1) x per-epoch total + n);
* Composer / LLM-Foundry ``[epoch=1][batch=12/100]`` (the batch count is the global step);
* MetricLogger ``Epoch: [3]  [ 20/782]`` and Swin-style ``Train: [30/300][20/2859]`` (iteration =
  epoch x per-epoch total + n, the epoch being 0-based); ``Test:  [ 0/50]`` is an evaluation;
* a tqdm / Lightning bar ``Epoch 0: 12%|..| 12/100 [..., loss=1.2]`` or with an unknown total
  ``Epoch 0: |   | 12/? [00:05<00:00, 2.3it/s, train_loss=1.23]``: the bar count (its ``k=v`` postfix
  holds the metrics; ``Validation``/``Sanity Checking`` bars are evaluations);
* a keyed step: ``global_step``, ``step``, ``iteration``, ``iter`` followed by ``:``, ``=``, ``#`` or
  spaces and a number, optionally ``/total`` (``step: 640/644``, ``step 00010/05000``,
  ``global_step=10``); ``global_step`` wins over ``step`` over ``iteration`` over ``iter``.

Key/value shapes (``pairs``): ``k: v`` and ``k=v`` anywhere (``k: v | k: v``, ``k=v, k=v``, runs
separated by two spaces or tabs), and ``k v`` inside ``|``-, tab- or two-space-separated runs
(``loss 1.9455 (1.9647)``, MetricLogger: the first number is the value). A leading mode word
(``Train``, ``Eval``, ``Val``, ``Test``) is removed from a multi-word key and makes an ``Eval``/
``Val``/``Test`` key an evaluation key. ``epoch`` goes to the ``epoch`` column, a printed ``rank`` to
``rank_label`` (when the launcher gave none), the step's total to ``train_iters``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from .schema import extra_name, snake_case
from .vocab import SUMMARY_KEYS, WRAPPERS, Mapping, is_eval_key, lookup, value_factors, value_of

_NUM = r"[-+]?(?:(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
_VAL = (rf"(?:{_NUM}(?:\s?[KMBGT](?![a-zA-Z]))?(?:\s?(?:%|ms|sec|s|GiB|GB|MiB|MB)(?![A-Za-z]))?"
        r"|[-+]?(?:nan|NaN|inf|Inf)(?![A-Za-z]))")

_MMENGINE = re.compile(r"\b(?:Iter|Epoch)\((?P<mode>train|val|test)\)\s{0,8}(?:\[(?P<ep>\d{1,9})\])?"
                       r"\s{0,8}\[\s{0,12}(?P<n>\d{1,19})\s{0,4}/\s{0,4}(?P<tot>\d{1,19})\]")
_COMPOSER = re.compile(r"\[(?:epoch=(?P<ep>\d{1,9})\]\[)?batch=(?P<n>\d{1,19})/(?P<tot>\d{1,19})\]")
_METRICLOGGER = re.compile(r"(?P<mode>Epoch|Train|Test|Val|Eval):\s{0,4}\[(?P<ep>\d{1,9})?(?:/\d{1,9})?\]?"
                           r"\s{0,8}\[\s{0,12}(?P<n>\d{1,19})/(?P<tot>\d{1,19})\]")
_METRICLOGGER_TEST = re.compile(r"(?P<mode>Test|Val|Eval):\s{1,8}\[\s{0,12}(?P<n>\d{1,19})/(?P<tot>\d{1,19})\]")
_BAR = re.compile(r"(?P<desc>[^|\r]{0,80}?)(?:(?:\d{1,3}%)?\|[^|]{0,200}\||:)\s{0,8}(?P<n>\d{1,18})(?:/(?P<tot>\d{1,18}|\?)|it)"
                  r"\s{0,8}\[(?P<post>[^\]]{0,2000})\]?")
_BAR_EPOCH = re.compile(r"Epoch (\d{1,9})")
_BAR_RATE = re.compile(r"(?<![\d.])(\d{1,12}(?:\.\d{1,12})?)\s?(s/it|it/s)")
_KEYED = re.compile(r"(?:(?<![\w/.-])(?P<key>global[_ ]step|steps?|iteration|iter)|(?<=/)(?P<key2>global_step))(?![\w/-])\s{0,4}(?:[:=#]\s{0,4}|\s{1,4})"
                    r"\[?\s{0,8}(?P<n>\d{1,19})(?![\d.eE])(?:\s{0,4}/\s{0,4}(?P<tot>\d{1,19}))?", re.IGNORECASE)
_KEY_RANK = {"global_step": 0, "global step": 0, "step": 1, "steps": 1, "iteration": 2, "iter": 3}
_EVAL_WORDS = re.compile(r"(?i)\b(?:validat\w*|evaluat\w*|eval|sanity checking|testing)\b")

#: A value printed inside a wrapper (vocab rule 7): ``np.float64(…)``, ``tensor(…, device='cuda:0')``,
#: ``Decimal('…')``, quotes, a list of one value; ``lb`` without ``rb``: a list of several values.
_WRAP_OPEN = rf"(?P<wrap>{WRAPPERS}\(\s{{0,4}})?(?P<lb>\[\s{{0,4}})?(?P<q>['\"]?)"
_WRAP_CLOSE = (r"(?P=q)(?(lb)\s{0,4}(?P<rb>\])?)"
               r"(?(wrap)(?:\s{0,4},[^()\n]{0,200}?(?:\([^()\n]{0,60}\)[^()\n]{0,100}?)?)?\))")
_KV = re.compile(
    r"(?:^|(?<=[\s|,;\[(\]{]))(?P<key>[A-Za-z_][\w./@%()-]{0,80}(?: [A-Za-z_(][\w./@%()-]{0,40}){0,5}?)"
    rf"\s{{0,4}}[:=]\s{{0,4}}{_WRAP_OPEN}(?P<val>{_VAL}){_WRAP_CLOSE}(?:\s{{0,2}}\((?:{_NUM})\))?"
    r"(?=$|[\s|,;\])}])")
#: The same pairs for a line that can hold no wrapper, quote or list value (no ``(``, quote, or ``[`` after a
#: ``:``/``=``): the plain regex, cheaper per line (the groups ``lb``/``rb`` are then never set)
_KV_PLAIN = re.compile(
    r"(?:^|(?<=[\s|,;\[(\]{]))(?P<key>[A-Za-z_][\w./@%()-]{0,80}(?: [A-Za-z_(][\w./@%()-]{0,40}){0,5}?)"
    rf"\s{{0,4}}[:=]\s{{0,4}}\[?(?P<val>{_VAL})(?:\s{{0,2}}\((?:{_NUM})\))?(?=$|[\s|,;\])}}])")
#: Any ``key: value`` / ``key=value`` pair, the value up to the next separator (a call's parentheses kept): what
#: ``pairs_at`` reports as dropped when its value is not a number (``parse --explain``)
_ANY_KV = re.compile(r"(?:^|(?<=[\s|,;]))(?P<key>[A-Za-z_][\w./@%()-]{0,80}?)\s{0,4}[:=]\s{0,4}"
                     r"(?P<val>[A-Za-z_][\w.]{0,60}\([^()\n]{0,200}\)|\[[^\[\]\n]{0,200}\]|[^\s|,;]{1,200})")
#: A whole segment ``Multi Word key value`` (mlx-lm ``Train loss 1.234``, ``Learning Rate 1.000e-05``,
#: ``Peak mem 12.3 GB``): two to five words, then the value (``pairs_at``)
_WORDS_VALUE = re.compile(rf"^[\s:;|,-]*(?P<key>[A-Za-z_][\w./@%-]{{0,40}}(?: [A-Za-z_][\w./@%()-]{{0,40}}){{1,4}})"
                          rf" {{1,4}}(?P<val>{_VAL})\s*$")
_SPACED = re.compile(rf"(?:^|(?<=\s))(?<![A-Za-z_]\s)(?P<key>[A-Za-z_][\w./@%-]{{0,80}})\s{{1,4}}(?P<val>{_VAL})(?:\s{{0,2}}\({_NUM}\))?"
                     r"(?=\s|$)")
_SEGMENTS = re.compile(r"\s*\|\s*|\t|\s{2,}|,\s+")
_MODE_WORDS = {"train": "train", "training": "train", "eval": "eval", "val": "eval", "validation": "eval",
               "test": "eval"}
_STEP_KEYS = frozenset({"global_step", "step", "steps", "iteration", "iter", "it", "global step", "_step",
                        "trainer/global_step", "train/global_step", "current_steps", "total_steps", "max_steps"})
#: The columns a generic record may fill besides the vocabulary's (so an unknown key never takes them).
_OUTPUTS = frozenset({"loss", "lr", "grad_norm", "elapsed_s", "tflops_per_gpu_logged", "mfu_logged", "tokens_per_s",
                      "tokens_per_s_total", "global_batch_size", "consumed_samples", "epoch", "train_iters"})
#: Canonical training columns: a line needs one of them to be a training record (the learning rate alone
#: is not enough: DeepSpeed's engine line `step=10, skipped=0, lr=[1e-05]` is not a training record).
TRAINING_COLUMNS = frozenset({"loss", "grad_norm", "elapsed_s", "tflops_per_gpu_logged", "mfu_logged",
                              "tokens_per_s", "tokens_per_s_total"})


@dataclass
class Step:
    n: int
    total: int | None = None
    epoch: int | None = None
    kind: str = "train"
    shape: str = ""
    start: int = 0
    end: int = 0
    post: str | None = None  # a bar's postfix (its k=v metrics)
    sec: float | None = None  # a bar's s/it


def find_step(text: str) -> Step | None:
    """The step a line prints (see the module doc), or None."""
    m = _MMENGINE.search(text)
    if m:
        n, tot = int(m.group("n")), int(m.group("tot"))
        ep = m.group("ep")
        it = (int(ep) - 1) * tot + n if ep and int(ep) >= 1 else n
        return Step(it, None if ep else tot, int(ep) if ep else None,
                    "train" if m.group("mode") == "train" else "eval", "mmengine", m.start(), m.end())
    m = _COMPOSER.search(text)
    if m:
        ep = m.group("ep")
        return Step(int(m.group("n")), int(m.group("tot")), int(ep) if ep else None, "train", "composer",
                    m.start(), m.end())
    m = _METRICLOGGER.search(text)
    if m and m.group("ep") is not None:
        ep, n, tot = int(m.group("ep")), int(m.group("n")), int(m.group("tot"))
        mode = m.group("mode")
        return Step(ep * tot + n, None, ep, "eval" if mode in ("Test", "Val", "Eval") else "train", "metriclogger",
                    m.start(), m.end())
    m = _METRICLOGGER_TEST.search(text)
    if m:
        return Step(int(m.group("n")), int(m.group("tot")), None, "eval", "metriclogger", m.start(), m.end())
    if ("|" in text and "/" in text) or "it [" in text:
        m = _BAR.search(text)
        if m and ("=" in m.group("post") or _BAR_EPOCH.search(m.group("desc"))):
            desc = m.group("desc")
            ep = _BAR_EPOCH.search(desc)
            tot = m.group("tot") or "?"
            kind = "eval" if _EVAL_WORDS.search(desc) else "train"
            post = m.group("post")
            r = _BAR_RATE.search(post)
            sec = None
            if r:
                v = float(r.group(1))
                sec = v if r.group(2) == "s/it" else (1.0 / v if v else None)
            return Step(int(m.group("n")), None if tot == "?" else int(tot), int(ep.group(1)) if ep else None, kind,
                        "bar", m.start(), m.end(), post, sec)
    best = None
    for m in _KEYED.finditer(text):
        key = (m.group("key") or m.group("key2")).lower()
        rank = _KEY_RANK.get(key, 9)
        if best is None or rank < best[0]:
            best = (rank, m)
    if best is not None:
        m = best[1]
        tot = m.group("tot")
        return Step(int(m.group("n")), int(tot) if tot else None, None, "train", "keyed", m.start(), m.end())
    return None


def pairs(text: str) -> list[tuple[str, str]]:
    """(key, value text) pairs of a line, in order (see the module doc)."""
    return [(k, v) for k, v, _ in pairs_at(text)]


def pairs_at(text: str, dropped: list | None = None) -> list[tuple[str, str, int]]:
    """``pairs`` with the offset of each value in ``text``. A wrapped value (vocab rule 7) comes back
    as the number inside it, with that number's offset. ``dropped``, when given, receives (key,
    why) of each key whose value is not one number (a list of several values)."""
    if "(" in text or "'" in text or '"' in text or ":[" in text or ": [" in text or "=[" in text or "= [" in text:
        out = []
        for m in _KV.finditer(text):
            if m.group("lb") and not m.group("rb"):
                if dropped is not None:
                    dropped.append((m.group("key").strip(), "a list of several values (not one number)"))
                continue
            out.append((m.group("key").strip(), m.group("val"), m.start("val")))
    else:  # no wrapper, quote or list can be on the line: the plain regex
        out = [(m.group("key").strip(), m.group("val"), m.start("val")) for m in _KV_PLAIN.finditer(text)]
    if "|" in text or "\t" in text or "  " in text or ", " in text:
        pos = 0
        for sep in [*_SEGMENTS.finditer(text), None]:
            end = sep.start() if sep is not None else len(text)
            seg = text[pos:end]
            n = len(out)
            for m in _SPACED.finditer(seg):
                out.append((m.group("key"), m.group("val"), pos + m.start("val")))
            rest = seg.lstrip(" \t:;|,-") if len(out) == n else ""
            if rest and ":" not in rest and "=" not in rest and " " in rest.rstrip():
                m = _WORDS_VALUE.match(seg)
                if m:
                    out.append((m.group("key"), m.group("val"), pos + m.start("val")))
            if sep is not None:
                pos = sep.end()
    if dropped is not None:  # (explain only) `key: value` pairs whose value is not a number: named with the reason
        from .vocab import unwrap

        seen = {k for k, _, _ in out} | {k for k, _ in dropped}
        for m in _ANY_KV.finditer(text):
            key = m.group("key").strip()
            if key not in seen and not key.lower().startswith(("step", "iter", "epoch")):
                seen.add(key)
                dropped.append((key, unwrap(m.group("val")).why or "not a number"))
    return out


def _mode_split(key: str) -> tuple[str, str]:
    """``Train loss/train/total`` -> ("train", "loss/train/total"); keys without a mode word -> ("", key)."""
    first, sep, rest = key.partition(" ")
    if sep and first.lower() in _MODE_WORDS and rest:
        return _MODE_WORDS[first.lower()], rest
    return "", key


_KEY_INFO: dict[str, tuple] = {}


def _key_info(raw_key: str) -> tuple:
    """(what, key, is_summary_key, mapping, extra column name) of a printed key, cached (a log has few
    distinct keys): what is "skip" (a step key, v_num), "epoch", "rank", "eval" or "metric"."""
    info = _KEY_INFO.get(raw_key)
    if info is not None:
        return info
    mode, key = _mode_split(raw_key)
    low = key.lower()
    if low in _STEP_KEYS or low == "v_num":
        info = ("skip", key, False, None, "")
    elif low == "epoch":
        info = ("epoch", key, False, None, "")
    elif low == "rank":
        info = ("rank", key, False, None, "")
    elif mode == "eval" or is_eval_key(key):
        info = ("eval", key, key in SUMMARY_KEYS, None, snake_case(("eval " if mode == "eval" else "") + key))
    else:
        info = ("metric", key, key in SUMMARY_KEYS, lookup(key), snake_case(key))
    if len(_KEY_INFO) < 100_000:
        _KEY_INFO[raw_key] = info
    return info


@dataclass
class Extraction:
    """What the generic extractor made of a line (also what ``parse --explain`` shows)."""

    step: Step | None
    record: dict | None
    kind: str
    mapped: dict[str, tuple[str, str]] = field(default_factory=dict)  # key -> (column, why)
    unknown: list[str] = field(default_factory=list)
    reason: str = ""
    #: column -> (value text, offset of the value in the line, ``vocab.value_factors``, mapped) of each
    #: number the record took from the line (what the vectorised lane replays)
    sources: dict[str, tuple] = field(default_factory=dict)


def extract(text: str, overrides: dict[str, Mapping] | None = None, step: Step | None = None) -> Extraction:
    """The record a metrics line means, or ``record=None`` with the ``reason``."""
    step = step if step is not None else find_step(text)
    if step is None:
        return Extraction(None, None, "other", reason="no step found")
    if step.shape == "bar":
        body = step.post or ""
    else:
        body = text[:step.start] + " " + text[step.end:]
    cut, shift = step.start, step.end - step.start - 1  # body offset p > cut is text offset p + shift
    sources: dict[str, tuple] = {}
    rec: dict = {}
    mapped: dict[str, tuple[str, str]] = {}
    unknown: list[str] = []
    kind = step.kind
    n_eval = 0
    summary = False
    rank = None
    found = pairs_at(body)
    # nanoGPT's `step 250: train loss 1.54, val loss 1.72`: the loss estimated on both splits is an
    # evaluation; its `train`-word keys are evaluation figures too (kept as extras), never the training loss
    compare = (any(k[:6].lower() == "train " for k, _, _ in found)
               and any(_key_info(k)[0] == "eval" for k, _, _ in found))
    for key, raw, at in found:
        at = at if (step.shape == "bar" or at < cut) else at + shift
        info = _key_info(key)
        what = info[0]
        if compare and what == "metric" and key[:6].lower() == "train ":
            info = ("eval", key, info[2], None, snake_case(key))
            what = "eval"
        if what == "skip":
            continue
        if what == "epoch":
            v = value_of(raw)
            if v is not None and "epoch" not in rec:
                rec["epoch"] = v
                sources["epoch"] = (raw, at, value_factors(raw), False)
            continue
        if what == "rank":
            rank = raw.strip()
            continue
        key = info[1]
        if info[2]:
            summary = True
        if what == "eval":
            n_eval += 1
            v = value_of(raw)
            if v is not None:
                name = extra_name(info[4], rec, _OUTPUTS)
                if name not in rec:
                    rec[name] = v
                    sources[name] = (raw, at, value_factors(raw), False)
                unknown.append(key)
            continue
        m = (overrides or {}).get(key) or info[3]
        if m is not None and m.column:
            v = value_of(raw, m)
            if v is not None and m.column not in rec:
                rec[m.column] = v
                mapped[key] = (m.column, m.why)
                sources[m.column] = (raw, at, value_factors(raw, m), True)
            continue
        v = value_of(raw)
        if v is None:
            continue
        name = extra_name(info[4], rec, _OUTPUTS)
        if name not in rec:
            rec[name] = v
            sources[name] = (raw, at, value_factors(raw), False)
        unknown.append(key)
    if step.shape == "bar" and step.sec is not None and "elapsed_s" not in rec and kind == "train":
        rec["elapsed_s"] = step.sec
        mapped["(bar rate)"] = ("elapsed_s", "the bar's s/it (it/s inverted)")
    training = TRAINING_COLUMNS.intersection(rec)
    if summary:
        kind = "summary"
    elif kind == "train" and not training and n_eval:
        kind = "eval"
    elif kind == "train" and _EVAL_WORDS.search(text[:step.start]) and not training:
        kind = "eval"
    if kind == "train" and not training:
        return Extraction(step, None, kind, mapped, unknown, "a step but no known training metric")
    if kind == "eval" and not n_eval and not rec:
        return Extraction(step, None, kind, mapped, unknown, "an evaluation step without a number")
    rec["iteration"] = step.n
    if step.total is not None and step.shape in ("mmengine", "keyed", "composer"):
        rec["train_iters"] = float(step.total)
    if step.epoch is not None:
        rec.setdefault("epoch", float(step.epoch))
    if kind != "train":
        rec["kind"] = kind
    if rank is not None:
        rec["_rank"] = rank
    return Extraction(step, rec, kind, mapped, unknown, sources=sources)


# ---- declared shapes: what is specific to a framework ----------------------------------------------

@dataclass(frozen=True)
class Shape:
    """A framework the generic extractor reads with a few declarations: ``detect`` (regex on the
    cleaned line) names the framework (normal confidence), ``overrides`` maps keys whose unit
    differs from the vocabulary's default."""

    name: str
    detect: re.Pattern
    overrides: dict[str, Mapping] = field(default_factory=dict)


SHAPES: tuple[Shape, ...] = (
    # nanochat (karpathy/nanochat scripts/base_train.py): `mfu` is printed in percent without a sign
    Shape("nanochat", re.compile(r"^step \d{5}/\d{5} \(\d{1,3}\.\d\d%\) \| loss: "),
          {"mfu": Mapping("mfu_logged", 0.01, "fraction", "nanochat prints MFU in percent without a sign", 0.01)}),
    Shape("mmengine", re.compile(r"\b(?:Iter|Epoch)\((?:train|val|test)\)\s{0,8}\[")),
    Shape("composer", re.compile(r"\[(?:epoch=\d{1,9}\]\[)?batch=\d{1,19}/\d{1,19}\]")),
)

#: Raw-text pre-filter for lines that may hold a step (the router only sees candidates); a line is a
#: generic candidate only when it also matches ``METRIC_PREFILTER`` (both vectorised in the parser),
#: so `saving checkpoint at iteration 100` never costs a Python call.
PREFILTER = (r"(?i:(?:global[_ ]step|\bsteps?|\biteration|\biter)\b\s{0,4}[:=#\s]\s{0,4}\[?\s{0,8}\d)"
             r"|\((?:train|val|test)\)\s{0,8}\[|batch=\d|\d/(?:\d+|\?) \[|\dit \[|(?:Epoch|Train|Test): \[")


METRIC_PREFILTER = (r"(?i:loss|lr|learning|grad|time|tflop|mfu|tok|throughput|tps|wps|tgs|dt[:= ]|/s\b|s/it|it/s)")


def shape_of(text: str) -> Shape | None:
    for shape in SHAPES:
        if shape.detect.search(text):
            return shape
    return None


# ---- registration ------------------------------------------------------------------------------

def _emit(router, fmt: str, line: int, sub: int, label: str | None, ex: Extraction) -> None:
    rec = ex.record
    rank = rec.pop("_rank", None)
    if label is None and rank is not None:
        label = f"rank{rank}" if rank.isdigit() else rank
    router.emit(fmt, line, sub, label, rec)


def _claimed(router, text: str) -> bool:
    """A line a declared format's strict detector claims is that format's (failed, if it came to
    nothing), never the generic extractor's."""
    return router.detect_any.search(text) is not None


def _handler(name: str):
    """The router handler of format ``name``: a declared shape takes only the lines it detects; the
    ``generic`` format (last) takes the rest."""

    def handle(router, line: int, sub: int, label: str | None, text: str, s: str) -> bool:
        shape = shape_of(text)
        if name != "generic" and (shape is None or shape.name != name):
            return False
        return _handle_generic(router, line, sub, label, text, s, shape)

    return handle


def _handle_generic(router, line: int, sub: int, label: str | None, text: str, s: str, shape) -> bool:
    if _claimed(router, text):
        return False
    if shape is not None and shape.name == "composer" and not pairs(text[text.find("]:") + 2:] if "]:" in text else ""):
        # a Composer header `[batch=12/100]:`: its metrics follow on indented `Train k: v` lines
        router.hold(line, sub, label, s, _composer_continues, _composer_flush, _composer_glue, max_pieces=200)
        return True
    ex = extract(text, shape.overrides if shape is not None else None)
    if ex.record is None:
        return False
    fmt = shape.name if shape is not None else "generic"
    if router.allowed(fmt):
        _emit(router, fmt, line, sub, label, ex)
    return True


_COMPOSER_PIECE = re.compile(r"^(?:Train|Eval) [^:]{1,160}: ")


def _composer_continues(text: str, s: str) -> bool:
    return _COMPOSER_PIECE.match(s) is not None


def _composer_glue(so_far: str, text: str, s: str) -> str:
    return so_far.rstrip() + "\t" + s


def _composer_flush(router, line: int, sub: int, label: str | None, text: str) -> None:
    ex = extract(text)
    if ex.record is None:
        router.ignored["other"] += 1
        return
    if router.allowed("composer"):
        _emit(router, "composer", line, sub, label, ex)


def _finish(router) -> None:
    n = router.seen.get("generic", 0)
    if n:
        from .schema import note_text

        note_text(f"{n} record(s) read only by the generic extractor (framework 'generic': lower confidence, "
                  f"no declared format; `vlm-perf parse --explain` shows the field mapping)")


_REGISTERED = False


def register_formats() -> None:
    """Register the generic extractor and its declared shapes (called last by ``formats._load_builtin``,
    so the declared formats come first in the registry and in error messages)."""
    global _REGISTERED
    if _REGISTERED:
        return
    _REGISTERED = True
    from .formats import LogFormat, register

    register(LogFormat(
        name="nanochat",
        source="nanochat `base_train` `step 00010/05000 (0.20%) | loss: … | dt: …ms | tok/sec: … | mfu: …`",
        example="step 00010/05000 (0.20%) | loss: 6.912345 | grad_norm: 0.51234 | lrm: 1.00 | dt: 523.45ms | "
                "tok/sec: 1,001,234 | mfu: 45.23 | total time: 0.10m",
        notes="read by the generic extractor; declared: `mfu` is a percentage printed without `%` (÷ 100); `dt` "
              "in ms → `elapsed_s`; `tok/sec` is the job's rate → `tokens_per_s_total`; `lrm` (a multiplier) "
              "is an extra",
        prefilter=r"^step \d{5}/\d{5} \(",
        order=950,
        handle=_handler("nanochat"),
    ))
    register(LogFormat(
        name="mmengine",
        source="xtuner / mmengine `Iter(train) [  10/5705]  lr: …  eta: …  time: …  data_time: …  memory: …  "
               "loss: …  grad_norm: …` (also `Epoch(train) [E][n/N]`, `Iter(val)`)",
        example="2024/05/07 12:12:48 - mmengine - INFO - Iter(train) [1020/2046]  lr: 1.0546e-04  eta: 0:56:17  "
                "time: 2.8955  data_time: 0.0172  memory: 15266  loss: 0.8473  grad_norm: 0.0009",
        notes="read by the generic extractor; `time` (seconds per iteration) → `elapsed_s`; `data_time` and "
              "`memory` (MB) are extras; `Iter(val)`/`Epoch(val)` lines are evaluations; epoch-based "
              "`Epoch(train) [E][n/N]` → iteration (E-1)·N+n",
        prefilter=r"\((?:train|val|test)\)\s{0,8}\[",
        order=951,
        handle=_handler("mmengine"),
    ))
    register(LogFormat(
        name="composer",
        source="Composer / LLM-Foundry console logger `[batch=12/100]:` followed by indented `Train key: value` "
               "lines",
        example="[batch=12/100]:\n\t Train time/batch: 11\n\t Train memory/allocated_mem: 6.8051\n"
                "\t Train loss/train/total: 11.6525\n\t Train throughput/batches_per_sec: 0.1\n"
                "\t Train time/train: 0.0081",
        notes="read by the generic extractor; the header and its indented lines are one record; "
              "`loss/train/total` → `loss`; `time/*` are counters and hours (extras); `throughput/device/"
              "tokens_per_sec` → `tokens_per_s`",
        prefilter=r"batch=\d|^\s*(?:Train|Eval) \S+: ",
        order=952,
        handle=_handler("composer"),
    ))
    register(LogFormat(
        name="generic",
        source="any other line with a step and known metrics: `k: v | k: v`, `k=v`, `k v` runs, tqdm/Lightning bars "
               "with a postfix (`1/?`), MetricLogger, DeepSpeed prints, torchtitan forks (`step: 640/644`)",
        example="[2025-01-02 03:04:05] epoch: 0, global_step: 10, loss: 2.3456, lr: 1.0e-05, grad_norm: 0.8, "
                "step_time: 1.25s, tokens_per_sec_per_gpu: 3,456",
        notes="lower confidence (a per-file note counts these records); keys mapped through the vocabulary "
              "below; a line needs a step and a known training metric (or an evaluation metric: kind `eval`)",
        prefilter=None,  # PREFILTER and METRIC_PREFILTER, both: the parser's candidate expression
        order=1000,
        handle=_handler("generic"),
        finish=_finish,
    ))

