"""Scoped race scenarios: several writers (publication keys) on one target branch, fenced by their prefixes.

The sibling of :class:`~tests.reliability.harness.RaceScenario` for the scoped fence
(``fence_scope="prefixes"``): the same processes (the attempt driver forked by the fork server, the
foreign writer), the same registry playing Airflow's part, the same lakeFS over HTTP. A seed derives
three or four writers, each its own publication key with a write set (a date partition of one table,
sometimes two, rarely the whole table) and sometimes a read set (the dimension prefix a foreign writer
may change, or another writer's partition). Partitions are drawn so that seeds mix disjoint writers
with overlapping ones (two writers of one partition, a whole-table writer, a writer of a prefix another
reads). Each writer's fate is drawn too: it runs plainly, crashes at a protocol boundary (most after
publishing) and is retried, is cleared while running (its try 1 a zombie that keeps going) with a new
try started, or loses its merge's answer (lakeFS merged; the client saw no answer).

:func:`check_scoped_invariants` judges the final state (see its docstring for each rule and for how a
publication whose task failed with ``PublishRaceError`` is treated).
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lakefs

from airflow_lakefence.core.fences.scope import RACE_REVERT_KEY
from airflow_lakefence.core.names.keys import AttemptId, PublicationKey
from airflow_lakefence.core.names.staging_names import staging_branch_name
from airflow_lakefence.core.records.metadata import ROLE_PUBLISH, decode_metadata
from airflow_lakefence.failpoints import POINTS
from airflow_lakefence.hardfence import install_hard_fence
from airflow_lakefence.lakefs_adapter.client import LakeFSClient
from tests.reliability.harness import (
    ATTEMPT_TIMEOUT,
    CURRENT_ALLOWED,
    DAG_ID,
    STALE_ALLOWED,
    TARGET,
    TASK_ID,
    History,
    Lake,
    Launcher,
    Outcome,
    Verdict,
    attempt_env,
    leftover_staging,
    new_repository,
    run_cleaner,
    spawn_attempt,
    spawn_foreign_writer,
)
from tests.reliability.registry import AttemptRegistry

TABLE = "tables/t/"
DIMS = "dims/d/"
#: What happens to a writer: runs plainly; try 1 crashes and is retried; try 1 is cleared while running
#: (a zombie) and try 2 runs; the merge's answer is lost once.
FATES = ("plain", "crash", "zombie", "lost")
FATE_WEIGHTS = (35, 25, 25, 15)
#: Where a crashing try 1 dies: mostly after its merge landed (the retry must replace it with others on top).
CRASH_POINTS = ("after_publish_action", "after_verify", "after_xcom", "after_stage")

#: Finding classes of the scoped sweep (a documented soft-fence hole counts as well as a broken invariant).
SCOPED_CLASSES = {
    "lost_commits": ("was lost", "no longer reachable", "unexplained commit", "content changed"),
    "double_scope": ("written by two live publications", "holds the output of", "overlap_race_detected"),
    "stale_publications": ("of a cleared or earlier try", "stale_merge_stacked", "stale_xcom_push"),
    "missing_output": ("output missing", "is not on the target"),
    "stale_reads": ("read set",),
}


def day(n: int) -> str:
    """The write prefix of date partition ``n``."""
    return f"{TABLE}date=2026-01-{n:02d}/"


def overlapping(a: Sequence[str], b: Sequence[str]) -> bool:
    """Whether two prefix sets share a path (one prefix equal to or under another)."""
    return any(p.startswith(q) or q.startswith(p) for p in a for q in b)


@dataclass(frozen=True)
class WriterPlan:
    """One writer (one publication key) of a scoped scenario.

    :param name: ``w0``, ``w1``...
    :param write: its write set (``output_prefixes``).
    :param read: its read set (``input_prefixes``), possibly empty.
    :param fate: one of :data:`FATES`.
    :param crash_at: where try 1 crashes (fate ``crash``).
    :param start_delay: seconds after the common start before try 1 runs.
    :param clear_after: seconds after try 1 starts when the task is cleared (fate ``zombie``).
    :param try2_delay: seconds between the clear (or the crash) and try 2's start.
    :param delays: per try (``"try1"``, ``"try2"``), seconds to sleep at each failpoint.
    :param output: ``stamp`` (one file per write prefix, the same path on every try: outputs conflict),
        ``parts`` (per-attempt file names: outputs add up), ``both``, or ``parts_only`` (only the
        per-attempt part files, not even the first try's marker file).
    :param write_mode: ``workspace`` or ``direct``.
    :param retry_empty: try 2 writes nothing (it must relocate only its own scope back to the input).
    """

    name: str
    write: tuple[str, ...]
    read: tuple[str, ...]
    fate: str
    crash_at: str | None
    start_delay: float
    clear_after: float
    try2_delay: float
    delays: Mapping[str, Mapping[str, float]]
    output: str
    write_mode: str
    retry_empty: bool

    def job(self, try_number: int) -> dict[str, Any]:
        """The race_job spec of try ``try_number``."""
        if try_number > 1 and self.retry_empty:
            return {}
        if self.output == "parts_only":  # no path shared with another writer: their merges never conflict
            return {"part_prefixes": list(self.write)}
        job: dict[str, Any] = {"first_try_files": {f"{w}try1-only.txt": f"{self.name} try 1" for w in self.write}}
        if self.output in ("stamp", "both"):
            job["stamp_paths"] = [f"{w}stamp.txt" for w in self.write]
        if self.output in ("parts", "both"):
            job["part_prefixes"] = list(self.write)
        return job

    def expected(self, try_number: int, staging: str) -> dict[str, str]:
        """The files try ``try_number`` (staging branch ``staging``) writes: ``{path: text}``."""
        job = self.job(try_number)
        files = dict(job.get("first_try_files", {})) if try_number == 1 else {}
        files.update({path: staging for path in job.get("stamp_paths", [])})
        files.update({f"{prefix}part-{staging}.txt": staging for prefix in job.get("part_prefixes", [])})
        return files


@dataclass(frozen=True)
class ScopedScenario:
    """One seeded scoped interleaving: writers, their fates, and a foreign writer.

    :param seed: the seed everything derives from.
    :param writers: the writers.
    :param foreign: seconds (after the first writer's try 1 starts) of each foreign commit.
    :param foreign_paths: the path each foreign commit writes.
    :param foreign_style: ``commit`` or ``merge``.
    :param release_at: a failpoint where every writer's try 1 waits until all have reached it, then
        all go on at once (``None``: no barrier).
    """

    seed: int
    writers: tuple[WriterPlan, ...]
    foreign: tuple[float, ...]
    foreign_paths: tuple[str, ...]
    foreign_style: str
    release_at: str | None = None

    @classmethod
    def from_seed(cls, seed: int) -> ScopedScenario:
        """Derive a scenario from ``seed`` (the same seed always gives the same scenario)."""
        rng = random.Random(f"scoped-{seed}")
        count = rng.choice([3, 3, 4])
        writes: list[tuple[str, ...]] = []
        fresh = 0
        for i in range(count):
            roll = rng.random()
            if roll < 0.07:
                chosen = (TABLE,)  # the whole table (a compaction): overlaps every partition writer
            elif i and roll < 0.4:
                chosen = rng.choice(writes)  # a writer of a partition another writes (a rerun of one date)
            else:
                fresh += 1
                chosen = (day(fresh),)
                if rng.random() < 0.15:  # two partitions, the second maybe another writer's
                    other = rng.choice([*{p for w in writes for p in w if p != TABLE}, day(fresh + 1)])
                    if other not in chosen:
                        chosen = tuple(sorted((*chosen, other)))
            writes.append(chosen)
        writers = []
        for i, write in enumerate(writes):
            read: tuple[str, ...] = ()
            if rng.random() < 0.4:
                candidates = [DIMS, *sorted({p for w in writes for p in w if not overlapping([p], write)})]
                read = (rng.choice(candidates),)
            fate = rng.choices(FATES, weights=FATE_WEIGHTS)[0]

            def delays(stall: bool) -> dict[str, float]:
                chosen = {p: round(rng.uniform(0.05, 1.0), 3) for p in POINTS if rng.random() < 0.2}
                if stall:  # one long pause: long enough for another try, or another writer, to publish
                    chosen[rng.choice(POINTS)] = round(rng.uniform(2.0, 4.0), 3)
                return chosen

            writers.append(
                WriterPlan(
                    name=f"w{i}",
                    write=write,
                    read=read,
                    fate=fate,
                    crash_at=rng.choice(CRASH_POINTS) if fate == "crash" else None,
                    start_delay=round(rng.uniform(0.0, 1.0), 3),
                    clear_after=round(rng.uniform(0.0, 3.0), 3),
                    try2_delay=round(rng.uniform(0.0, 0.5), 3),
                    delays={"try1": delays(fate == "zombie" and rng.random() < 0.4), "try2": delays(False)},
                    output=rng.choice(["stamp", "parts", "both"]),
                    write_mode="direct" if rng.random() < 0.2 else "workspace",
                    retry_empty=fate in ("crash", "zombie") and rng.random() < 0.2,
                )
            )
        foreign = tuple(sorted(round(rng.uniform(0.0, 5.0), 3) for _ in range(rng.choice([0, 1, 1, 2]))))
        readers_of_dims = any(DIMS in w.read for w in writers)
        paths = tuple(
            f"{DIMS}foreign-{n}.txt" if readers_of_dims and rng.random() < 0.5 else f"foreign/{n}.txt"
            for n in range(len(foreign))
        )
        return cls(seed, tuple(writers), foreign, paths, rng.choice(["commit", "merge"]))

    @classmethod
    def simultaneous(cls, seed: int, writers: int = 3) -> ScopedScenario:
        """``writers`` runs of one date partition released at the same instant (a backfill re-running
        a date while its scheduled run publishes): no delay, no crash, per-run file names (Spark's
        ``part-<uuid>``: their merges never conflict), so only the fence stands between them. They
        are released together at their publish step (after the second attempt fence: staged, about
        to read the target), so every run reaches the publish fence within milliseconds.

        :param seed: names the scenario (the scenario is the same for every seed; timing varies).
        :param writers: how many writers.
        """
        plans = tuple(
            WriterPlan(
                name=f"w{i}",
                write=(day(1),),
                read=(),
                fate="plain",
                crash_at=None,
                start_delay=0.0,
                clear_after=0.0,
                try2_delay=0.0,
                delays={"try1": {}, "try2": {}},
                output="parts_only",
                write_mode="workspace",
                retry_empty=False,
            )
            for i in range(writers)
        )
        return cls(seed, plans, (), (), "commit", release_at="after_fence_2")

    def overlaps(self) -> list[tuple[str, str]]:
        """Pairs of writers whose write sets overlap."""
        return [
            (a.name, b.name)
            for i, a in enumerate(self.writers)
            for b in self.writers[i + 1 :]
            if overlapping(a.write, b.write)
        ]

    def describe(self) -> dict[str, Any]:
        """A JSON-able description."""
        return {
            "seed": self.seed,
            "writers": {
                w.name: {"write": w.write, "read": w.read, "fate": w.fate, "crash_at": w.crash_at} for w in self.writers
            },
            "overlaps": self.overlaps(),
            "foreign": list(zip(self.foreign, self.foreign_paths, strict=True)),
        }


# -- the invariants ---------------------------------------------------------------------------


@dataclass
class WriterRun:
    """A writer as the checker sees it: its key, its plan and how each of its tries ended.

    :param plan: the writer's plan.
    :param key: its publication key.
    :param tries: ``{try_number: Outcome}`` (every try that ran, crashed ones included).
    :param ti_ids: ``{try_number: ti_id}`` of every try the scheduler minted.
    """

    plan: WriterPlan
    key: PublicationKey
    tries: dict[int, Outcome]
    ti_ids: dict[int, str]

    @property
    def current(self) -> int:
        """The current try's number (the last one the scheduler minted)."""
        return max(self.ti_ids)

    @property
    def live(self) -> bool:
        """Whether the writer's task succeeded (its current try returned): a live publication."""
        outcome = self.tries.get(self.current)
        return outcome is not None and outcome.succeeded

    def staging(self, try_number: int) -> str:
        """The staging branch of try ``try_number``."""
        return staging_branch_name(AttemptId(self.key, try_number, self.ti_ids[try_number]))


def _read(repo: lakefs.Repository, ref: str, path: str) -> str | None:
    try:
        with repo.ref(ref).object(path).reader(mode="r", pre_sign=False) as fd:
            return str(fd.read())
    except lakefs.exceptions.NotFoundException:
        return None


def check_scoped_invariants(
    repo: lakefs.Repository,
    input_commit: str,
    writers: Sequence[WriterRun],
    registry: AttemptRegistry,
    *,
    fence: str,
    secret: str | None = None,
) -> Verdict:
    """Check the scoped sweep's invariants on the final state of the target.

    1. **Explained history, nothing lost.** The input is on HEAD's first-parent line; every commit
       above it is a publication of one of the writers' keys or an acknowledged foreign commit; every
       acknowledged foreign commit is reachable from HEAD and its file still holds its text; every
       commit a try saw as the target's HEAD or reported as its output is still reachable (scoped
       replacements are merges only: nothing is ever rewound).
    2. **Each live publication's output exactly once.** A writer is *live* when its current try
       succeeded (Airflow shows success). Its write set at HEAD holds exactly the files its current try
       wrote (one stamp, one part file per prefix: no earlier try's part stacked beside it, no file
       written by try 1 only once try 2 replaced it), and its XCom ``output_ref`` is the current try's.
    3. **No cleared or earlier try's output published.** No file of a writer's non-current try is at
       HEAD while the writer is live. When the writer is not live its task failed (with a named
       ``PublishFenceError``) and the leftover is noted, not a violation: Airflow shows the failure,
       the error names the commit and the evidence is kept.
    4. **No scope written by two live publications.** For each live writer, nothing under its write or
       read set changed between the input and the first parent of its publication (for a no-op: the HEAD
       its scan probed) except by its own key's earlier tries (the fence's promise, checked from
       lakeFS's diffs, not from the product's decisions: a stale read is a violation too); no path is
       changed by the publications of two live writers; another writer's file inside a live writer's
       write set is allowed only when it is the current output of a live writer that landed *later* (the
       serial order: e.g. a partition published after a whole-table writer whose own files lie outside
       that partition: its scope was untouched when it landed, so the two wrote disjoint paths).
    5. Every try ends with a named outcome (a crash only where one was injected); no staging branch
       is left but evidence, before and after the cleaner ran; the secret is in no log.

    **A publication whose task failed with ``PublishRaceError``.** With the soft fence two writers of
    overlapping scopes can both pass the scan before either merges; lakeFS merges both (different file
    names do not conflict), and the one whose merge was computed on a HEAD it did not probe re-probes
    the scope after the merge and raises ``PublishRaceError`` naming the path (protocol.md step 11:
    detected, never silently fixed). That publication is **not live**: its task failed and the error
    names it. Its files at HEAD (in its own scope, which may overlap a live writer's) are recorded as
    the documented soft-fence hole ``overlap_race_detected`` (``stale_merge_stacked`` when the raising
    try is a cleared zombie of a live writer) and never hidden; without that raise they are violations.
    With the hard fence the same landing is a violation: lakeFS refuses the second merge, exactly one
    lands.

    :param repo: the repository.
    :param input_commit: the input commit every writer built on.
    :param writers: the writers.
    :param registry: the shared registry (its timeline: foreign commits, decisions).
    :param fence: ``soft`` or ``hard``.
    :param secret: the lakeFS secret (must be in no log or outcome).
    """
    verdict = Verdict()
    history = History(repo)
    events = registry.events()
    head = history.head()
    verdict.notes["head"] = head
    soft = fence == "soft"
    keys = {w.key: w for w in writers}
    by_name = {w.plan.name: w for w in writers}

    # 1. The history: explained, nothing rewound, nothing lost.
    chain = history.first_parent_chain(head, input_commit)
    if chain is None:
        verdict.violations.append(f"input {input_commit} is not on the first-parent history of HEAD {head}")
        return verdict
    foreign_acked = {e["detail"]["id"]: e["detail"] for e in events if e["what"] == "foreign_commit"}
    publications: dict[str, list[tuple[Any, AttemptId]]] = {w.plan.name: [] for w in writers}
    taken_back: dict[str, str] = {}  # a race loser's merge -> the revert that took it back
    for view in chain:
        record = decode_metadata(view.metadata)
        if record is not None and record.role == ROLE_PUBLISH and record.attempt.key in keys:
            publications[keys[record.attempt.key].plan.name].append((view, record.attempt))
        elif RACE_REVERT_KEY in view.metadata:
            taken_back[view.metadata[RACE_REVERT_KEY]] = view.id
        elif view.id not in foreign_acked:
            verdict.violations.append(f"unexplained commit {view.id} on the target")
    # A race take-back reverts a publication of one of the writers, whose try then failed closed.
    for merge, revert in taken_back.items():
        owner_of = [(w, attempt) for w in writers for v, attempt in publications[w.plan.name] if v.id == merge]
        if not owner_of:
            verdict.violations.append(f"revert {revert[:8]} takes back {merge[:8]}, which is no writer's publication")
            continue
        w, attempt = owner_of[0]
        outcome = w.tries.get(attempt.try_number)
        if outcome is None or not outcome.raised("ScopeOverlapError"):
            verdict.violations.append(
                f"{w.plan.name} try {attempt.try_number}'s publication was taken back but the try did not raise "
                f"ScopeOverlapError ({None if outcome is None else outcome.error_type or outcome.result.get('status')})"
            )
        verdict.notes.setdefault("race_taken_back", []).append(f"{w.plan.name}.t{attempt.try_number}")
    for name in publications:
        publications[name] = [(v, a) for v, a in publications[name] if v.id not in taken_back]
    verdict.notes["publications"] = {
        name: [f"t{a.try_number}:{v.id[:8]}" for v, a in pubs] for name, pubs in publications.items()
    }
    for fid, detail in foreign_acked.items():
        if not history.reachable(head, fid):
            verdict.violations.append(f"foreign commit {fid[:8]} was lost")
        elif _read(repo, head, detail["path"]) != f"foreign {detail['n']}":
            verdict.violations.append(f"foreign commit {fid[:8]}'s file {detail['path']} content changed")
    seen: dict[str, str] = {}
    for event in events:
        detail = event["detail"] if isinstance(event["detail"], dict) else {}
        if event["what"] == "decision" and not detail.get("early"):
            for ref in (detail.get("head"), detail.get("output_ref")):
                if ref:
                    seen.setdefault(ref, event["who"])
    for w in writers:
        for number, outcome in w.tries.items():
            if outcome.succeeded:
                seen.setdefault(outcome.result["output_ref"], f"{w.plan.name}.try{number}")
    for ref, who in seen.items():
        if ref != input_commit and not history.reachable(head, ref):
            verdict.violations.append(f"commit {ref[:8]} ({who} saw or reported it) is no longer reachable from HEAD")

    # Attribute every file under the writers' prefixes at HEAD to a writer's try.
    owner: dict[str, tuple[str, int]] = {}
    for w in writers:
        for number in w.ti_ids:
            owner[w.staging(number)] = (w.plan.name, number)
    roots = sorted({p for w in writers for p in w.plan.write})
    roots = [p for p in roots if not any(q != p and p.startswith(q) for q in roots)]
    files: dict[str, str] = {}
    for root in roots:
        for obj in repo.ref(head).objects(prefix=root):
            files[obj.path] = _read(repo, head, obj.path) or ""

    def attribute(path: str, text: str) -> tuple[str, int] | None:
        if text in owner:
            return owner[text]  # a stamp or a part file: the attempt's staging branch name
        if path.endswith("try1-only.txt") and text.endswith(" try 1"):
            return text.removesuffix(" try 1"), 1
        return None

    def raised_race(name: str, number: int) -> bool:
        outcome = by_name[name].tries.get(number)
        return outcome is not None and outcome.raised("PublishRaceError")

    def landed_but_reported(name: str, number: int, path: str, what: str) -> bool:
        """A file of a try that raised PublishRaceError: a soft-fence hole, a violation under the hard fence."""
        if not raised_race(name, number):
            return False
        if soft:
            verdict.holes.append(what)
            return True
        verdict.violations.append(f"{path} of {name} try {number} landed although it raised PublishRaceError")
        return True

    # 2-5. Each live writer's publication: where it landed, what it changed, what its scope holds now.
    live = [w for w in writers if w.live]
    verdict.notes["live"] = sorted(w.plan.name for w in live)
    position = {view.id: i for i, view in enumerate(chain)}  # 0 is HEAD: a smaller index landed later
    position[input_commit] = len(chain)
    # Where each live writer's decision took effect: its publication, or, for a no-op, the HEAD its scan
    # found untouched (its scope held the input's content up to there).
    landed: dict[str, tuple[int, str, Any]] = {}
    for w in live:
        own = [v for v, attempt in publications[w.plan.name] if attempt.try_number == w.current]
        if own:
            landed[w.plan.name] = (position[own[0].id], own[0].parents[0], own[0])
            continue
        probed = [
            e["detail"].get("head") or input_commit
            for e in events
            if e["who"] == f"{w.plan.name}.try{w.current}" and e["what"] == "decision" and e["detail"].get("scoped")
        ]
        if w.plan.expected(w.current, w.staging(w.current)):
            verdict.violations.append(f"{w.plan.name} succeeded but its publication is not on the target")
        elif probed and probed[-1] in position:
            landed[w.plan.name] = (position[probed[-1]], probed[-1], None)
    changed: dict[str, set[str]] = {}
    for w in live:
        if w.plan.name not in landed:
            continue
        _, base, pub = landed[w.plan.name]
        where = f"its publication {pub.id[:8]}" if pub is not None else f"its no-op on {base[:8]}"
        if pub is not None:
            changed[w.plan.name] = {
                c.path
                for p in w.plan.write
                for c in repo.ref(base).diff(pub.id, prefix=p, max_amount=1000, type="two_dot")
            }
        # The fence's promise at the landing: nothing in the scope changed since the input but this key's own.
        for prefix in sorted({*w.plan.write, *w.plan.read}):
            for change in repo.ref(input_commit).diff(base, prefix=prefix, max_amount=100, type="two_dot"):
                text = _read(repo, base, change.path)
                who = None if text is None else attribute(change.path, text)
                if prefix in w.plan.write and who is not None and who[0] == w.plan.name:
                    continue  # an earlier try of this key: the publication replaced it
                what = "read set" if prefix in w.plan.read else "write set"
                by = "a foreign commit" if who is None else f"{who[0]} try {who[1]}"
                verdict.violations.append(
                    f"{w.plan.name}'s {what} {prefix} had changed ({change.path}, by {by}) between the input and "
                    f"{where}"
                )
                break
    names = sorted(changed)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            for path in sorted(changed[a] & changed[b])[:1]:
                verdict.violations.append(f"{path} written by two live publications: {a} and {b}")
    for path, text in sorted(files.items()):
        who = attribute(path, text)
        scope_owners = [w for w in live if any(path.startswith(p) for p in w.plan.write)]
        if who is None:
            verdict.violations.append(f"{path} ({text[:40]!r}) is nobody's output")
            continue
        name, number = who
        author = by_name[name]
        for w in scope_owners:
            if w is author:
                if number != w.current and not landed_but_reported(name, number, path, "stale_merge_stacked"):
                    verdict.violations.append(
                        f"{path}: output of a cleared or earlier try {number} of live {name} (current try {w.current})"
                    )
            elif author.live and number == author.current and _later(landed, name, w.plan.name):
                # Serial order: the later publication's scope was untouched when it landed (checked above),
                # so it wrote paths the earlier one had not (e.g. a partition under a whole-table writer's prefix).
                verdict.notes.setdefault("later_live_inside_earlier_scope", []).append(f"{name}>{w.plan.name}")
            elif not landed_but_reported(name, number, path, "overlap_race_detected"):
                verdict.violations.append(
                    f"the write set of live {w.plan.name} holds the output of {name} try {number}"
                )
        if not author.live and not scope_owners:
            current = author.tries.get(author.current)
            if current is not None and current.raised("PublishFenceError"):
                if not landed_but_reported(name, number, path, "overlap_race_detected"):
                    verdict.notes.setdefault("dead_output_visible_task_failed", []).append(f"{name}.t{number}")
            else:
                verdict.violations.append(
                    f"{path}: output of {name} try {number} visible, and its task did not fail closed "
                    f"({None if current is None else current.error_type or current.result.get('status')})"
                )
    for w in live:
        staging = w.staging(w.current)
        for path, text in w.plan.expected(w.current, staging).items():
            if files.get(path) != text:
                verdict.violations.append(f"{w.plan.name}'s output missing or wrong at {path}: {files.get(path)!r}")
        result = w.tries[w.current].result["output_ref"]
        xcom = registry.visible_xcoms(of=w.key).get("output_ref")
        if xcom != result:
            pushers = [x["ti_id"] for x in registry.xcoms(of=w.key) if x["key"] == "output_ref"]
            if pushers and pushers[-1] != w.ti_ids[w.current]:
                verdict.holes.append("stale_xcom_push")
            else:
                verdict.violations.append(f"{w.plan.name}'s visible XCom output_ref {xcom} is not its output {result}")

    # 6. Named outcomes, staging branches, the secret.
    evidence = set()
    for w in writers:
        for number, outcome in w.tries.items():
            if outcome.raised("PublishFenceError"):
                evidence.add(outcome.result.get("staging_branch"))
            if outcome.succeeded or (outcome.crashed and number == 1 and w.plan.fate == "crash"):
                continue
            allowed = CURRENT_ALLOWED if number == w.current else STALE_ALLOWED
            if not any(outcome.raised(name) for name in allowed):
                verdict.violations.append(
                    f"{w.plan.name}.try{number} ended with {outcome.error_type or f'exit code {outcome.returncode}'}: "
                    f"{outcome.result.get('message', '')[:300]}"
                )
            if secret and (secret in outcome.log or secret in json.dumps(outcome.result)):
                verdict.violations.append(f"the lakeFS secret appears in {w.plan.name}.try{number}'s log or outcome")
    for w in writers:
        for name in leftover_staging(repo, w.key):
            if name not in evidence and not _temp_of_crash(name, w):
                verdict.violations.append(f"staging branch {name} left behind")
    return verdict


def _later(landed: Mapping[str, tuple[int, str, Any]], later: str, earlier: str) -> bool:
    """Whether ``later``'s live publication took effect above ``earlier``'s on the first-parent line."""
    if later not in landed or earlier not in landed:
        return False
    return landed[later][0] < landed[earlier][0]


def _temp_of_crash(branch: str, writer: WriterRun) -> bool:
    """A branch of a try that crashed (a dead process deletes nothing; the cleaner's work)."""
    return any(o.crashed and branch.startswith(writer.staging(n)) for n, o in writer.tries.items())


def check_cleaner_scoped(
    lake: Lake, repo: lakefs.Repository, writers: Sequence[WriterRun], registry: AttemptRegistry, verdict: Verdict
) -> None:
    """Run the cleaner once; no staging branch of a dead attempt may be left after it (evidence excepted)."""
    report = run_cleaner(lake, repo.id, registry)
    verdict.notes["cleaner_deleted"] = len(report["deleted"])
    kept = {entry["branch"] for entry in report["kept"] if entry.get("evidence")}
    for w in writers:
        for name in leftover_staging(repo, w.key):
            if name not in kept:
                verdict.violations.append(f"staging branch {name} left after the cleaner ran")


# -- running a scenario -----------------------------------------------------------------------


@dataclass
class ScopedReport:
    """The result of one scoped scenario."""

    scenario: ScopedScenario
    verdict: Verdict
    outcomes: dict[str, Any]
    seconds: float
    decisions: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """A JSON-able summary."""
        return {
            "seed": self.scenario.seed,
            "ok": self.verdict.ok,
            "scenario": self.scenario.describe(),
            "violations": self.verdict.violations,
            "holes": self.verdict.holes,
            "notes": self.verdict.notes,
            "outcomes": self.outcomes,
            "decisions": self.decisions,
            "seconds": round(self.seconds, 1),
        }


def run_scoped_race(
    launcher: Launcher, lake: Lake, workdir: Path, home: Path, scenario: ScopedScenario, *, fence: str = "soft"
) -> ScopedReport:
    """Run one scoped scenario end to end and check the invariants.

    :param fence: ``soft``, or ``hard``: the hard fence (v2, scoped) installed on the target before the
        input commit, every writer requiring it.
    """
    started = time.monotonic()
    workdir.mkdir(parents=True, exist_ok=True)
    repo, input_commit = new_repository(lake, {"in/data.txt": "input", f"{DIMS}v.txt": "dimension v1"})
    if fence == "hard":
        adapter = LakeFSClient(lake.url, lake.access_key_id, lake.secret_access_key)
        input_commit = install_hard_fence(adapter, repo.id, TARGET).head
    registry = AttemptRegistry(workdir / "registry.sqlite")
    env = attempt_env(lake, home)
    phases = {"setup": time.monotonic() - started}
    keys: dict[str, PublicationKey] = {}
    firsts: dict[str, Any] = {}
    seconds: dict[str, Any] = {}
    for w in scenario.writers:
        key = keys[w.name] = PublicationKey(DAG_ID, f"scoped-{scenario.seed}-{w.name}", TASK_ID, -1)
        operator: dict[str, Any] = {
            "repository": repo.id,
            "target_branch": TARGET,
            "input_ref": input_commit,
            "write_mode": w.write_mode,
            "output_prefixes": list(w.write),
            "fence_scope": "prefixes",
            "allow_empty_workspace": True,
        }
        if w.read:
            operator["input_prefixes"] = list(w.read)
        if fence == "hard":
            operator["hard_fence"] = "require"
        wdir = workdir / w.name
        wdir.mkdir(exist_ok=True)
        who: dict[str, Any] = {"who_prefix": f"{w.name}."}
        if scenario.release_at is not None:
            parties = [f"{other.name}.try1" for other in scenario.writers]
            who["barrier"] = {"point": scenario.release_at, "parties": parties}
        firsts[w.name] = spawn_attempt(
            launcher, wdir, env, registry, operator, w.job(1),
            await_try=(key, 1, w.start_delay), delays=w.delays["try1"],
            crash_at=w.crash_at, spec_extra={**who, "lose_merge_answer": w.fate == "lost"},
        )  # fmt: skip
        if w.fate in ("crash", "zombie"):
            seconds[w.name] = spawn_attempt(
                launcher, wdir, env, registry, operator, w.job(2),
                await_try=(key, 2, w.try2_delay), delays=w.delays["try2"], spec_extra={"who_prefix": who["who_prefix"]},
            )  # fmt: skip
    foreign = None
    if scenario.foreign:
        foreign = spawn_foreign_writer(
            launcher, workdir, env, lake, registry, repo.id, schedule=scenario.foreign,
            style=scenario.foreign_style, paths=scenario.foreign_paths,
            epoch_who=f"{scenario.writers[0].name}.try1",
        )  # fmt: skip
    outcomes: dict[str, dict[int, Outcome]] = {w.name: {} for w in scenario.writers}
    errors: list[BaseException] = []

    def control(w: WriterPlan) -> None:
        key = keys[w.name]
        try:
            if w.fate == "zombie":
                t0 = registry.wait_for(f"{w.name}.try1", "start")
                time.sleep(max(0.0, t0 + w.clear_after - time.time()))
                registry.new_try(key.dag_id, key.run_id, key.task_id)  # the clear: try 1 is now a zombie
                outcomes[w.name][1] = firsts[w.name].wait()
                outcomes[w.name][2] = seconds[w.name].wait()
                return
            first = outcomes[w.name][1] = firsts[w.name].wait()
            if w.fate == "crash":
                if first.crashed:
                    registry.new_try(key.dag_id, key.run_id, key.task_id)  # the scheduler's retry
                    outcomes[w.name][2] = seconds[w.name].wait()
                else:  # it failed or succeeded before the crash point: no retry
                    seconds[w.name].proc.kill()
                    seconds[w.name].proc.wait(30)
        except BaseException as exc:
            errors.append(exc)

    try:
        for w in scenario.writers:  # every writer's try 1 is minted at once: they start together
            registry.new_try(keys[w.name].dag_id, keys[w.name].run_id, keys[w.name].task_id)
        threads = [threading.Thread(target=control, args=(w,), name=f"control-{w.name}") for w in scenario.writers]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(ATTEMPT_TIMEOUT * 2)
        if foreign is not None:
            foreign.wait(ATTEMPT_TIMEOUT)
    finally:
        for proc in [a.proc for a in (*firsts.values(), *seconds.values())] + [foreign]:
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(30)
    if errors:
        raise errors[0]
    phases["run"] = time.monotonic() - started - sum(phases.values())
    runs = []
    for w in scenario.writers:
        key = keys[w.name]
        ti_ids = {
            n: ti for n in (1, 2, 3) if (ti := registry.find_try(key.dag_id, key.run_id, key.task_id, n)) is not None
        }
        runs.append(WriterRun(w, key, outcomes[w.name], ti_ids))
    verdict = check_scoped_invariants(repo, input_commit, runs, registry, fence=fence, secret=lake.secret_access_key)
    verdict.notes["fence"] = fence
    verdict.notes["foreign_failed"] = [e["detail"] for e in registry.events() if e["what"] == "foreign_failed"]
    phases["check"] = time.monotonic() - started - sum(phases.values())
    check_cleaner_scoped(lake, repo, runs, registry, verdict)
    phases["cleaner"] = time.monotonic() - started - sum(phases.values())
    verdict.notes["seconds"] = {name: round(value, 2) for name, value in phases.items()}
    summary = {
        f"{w.plan.name}.try{n}": (
            o.error_type or ("crash" if o.crashed else o.result.get("status", f"exit {o.returncode}"))
        )
        for w in runs
        for n, o in sorted(w.tries.items())
    }
    decisions = [
        f"{e['who']}:{e['detail']['action']}"
        for e in registry.events()
        if e["what"] == "decision" and e["detail"].get("scoped")
    ]
    return ScopedReport(scenario, verdict, summary, time.monotonic() - started, decisions)
