"""LakeFSCommitSensor and LakeFSFileSensor end to end (poke, reschedule and deferrable modes), with
lakeFS call counts from the local server's request counters."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import lakefs
import pytest

from airflow_lakefence.hooks.lakefs import LakeFSHook
from tests.integration.helpers import commit_files, run_dag, xcoms
from tests.integration.sensor_helpers import after, sensor_waits, waited_how

pytestmark = pytest.mark.usefixtures("airflow_db", "lakefs_conn")



def test_commit_sensor_sees_a_new_commit_with_two_calls(
    sensors: Any, seeded: tuple[lakefs.Repository, str], lakefence_controls: Any
) -> None:
    repo, seed = seeded
    new = commit_files(repo, "main", {"any/x.txt": "x"}, "new")
    lakefence_controls.reset_counts()
    dr = run_dag(sensors.commit_dag, {"repository": repo.id, "since_ref": seed})
    assert dr.state == "success"
    values = xcoms(dr, "sense")
    assert values["return_value"] == new
    assert lakefence_controls.counts() == {"getCommit": 2}  # HEAD, then since_ref
    # The "lakeFS commit" extra link points at the commit the sensor saw.
    assert values["_link_LakeFSSensorCommitLink"].endswith(f"/repositories/{repo.id}/commits/{new}")


def test_commit_sensor_waits_while_nothing_moved(
    sensors: Any, seeded: tuple[lakefs.Repository, str], lakefence_controls: Any
) -> None:
    repo, seed = seeded
    lakefence_controls.reset_counts()
    dr = run_dag(sensors.commit_dag, {"repository": repo.id, "since_ref": seed})
    assert dr.state == "failed"  # timed out after 1 s
    counts = lakefence_controls.counts()
    assert set(counts) == {"getCommit"} and counts["getCommit"] >= 2  # one call per poke


def test_commit_sensor_prefix_ignores_other_paths(
    sensors: Any, seeded: tuple[lakefs.Repository, str], lakefence_controls: Any
) -> None:
    repo, seed = seeded
    commit_files(repo, "main", {"other/x.txt": "x"}, "elsewhere")
    conf = {"repository": repo.id, "since_ref": seed, "prefix": "tables/"}
    assert run_dag(sensors.commit_dag, conf).state == "failed"
    wanted = commit_files(repo, "main", {"tables/t/part-0.parquet": "p"}, "table")
    lakefence_controls.reset_counts()
    dr = run_dag(sensors.commit_dag, conf)
    assert dr.state == "success"
    assert xcoms(dr, "sense")["return_value"] == wanted
    assert lakefence_controls.counts() == {"getCommit": 1, "diffRefs": 1}


def test_commit_sensor_deferred(sensors: Any, seeded: tuple[lakefs.Repository, str]) -> None:
    repo, seed = seeded
    made: list[str] = []
    late = lambda: made.append(commit_files(repo, "main", {"tables/a.txt": "a"}, "late"))  # noqa: E731
    with after(0.2, late, once=sensor_waits("lf_sense_commit_deferred", "deferred")) as errors:
        dr = run_dag(sensors.commit_deferred_dag, {"repository": repo.id, "since_ref": seed, "prefix": "tables/"})
    assert not errors
    assert dr.state == "success"
    assert xcoms(dr, "sense")["return_value"] == made[0]
    assert waited_how(dr)["deferred"]


def test_commit_sensor_reschedule(sensors: Any, seeded: tuple[lakefs.Repository, str]) -> None:
    repo, seed = seeded
    made: list[str] = []
    late = lambda: made.append(commit_files(repo, "main", {"b.txt": "b"}, "late"))  # noqa: E731
    with after(0.2, late, once=sensor_waits("lf_sense_commit_reschedule", "rescheduled")) as errors:
        dr = run_dag(sensors.commit_reschedule_dag, {"repository": repo.id, "since_ref": seed})
    assert not errors
    assert dr.state == "success"
    assert xcoms(dr, "sense")["return_value"] == made[0]
    assert waited_how(dr)["reschedules"] >= 1


def test_commit_sensor_unknown_since_ref_fails(sensors: Any, seeded: tuple[lakefs.Repository, str]) -> None:
    repo, _ = seeded
    dr = run_dag(sensors.commit_dag, {"repository": repo.id, "since_ref": "no-such-ref"})
    assert dr.state == "failed"
    assert xcoms(dr, "sense").get("return_value") is None


def test_file_sensor_finds_a_committed_object(
    sensors: Any, seeded: tuple[lakefs.Repository, str], lakefence_controls: Any
) -> None:
    repo, seed = seeded
    lakefence_controls.reset_counts()
    dr = run_dag(sensors.file_dag, {"repository": repo.id, "path": "in/data.txt"})
    assert dr.state == "success"
    values = xcoms(dr, "sense")
    assert values["return_value"] == seed
    assert lakefence_controls.counts() == {"getCommit": 1, "statObject": 1}
    assert values["_link_LakeFSSensorCommitLink"].endswith(f"/repositories/{repo.id}/commits/{seed}")


def test_file_sensor_ignores_uncommitted_objects(sensors: Any, seeded: tuple[lakefs.Repository, str]) -> None:
    repo, _ = seeded
    repo.branch("main").object("late/x.txt").upload(b"x", pre_sign=False)  # staged, not committed
    dr = run_dag(sensors.file_dag, {"repository": repo.id, "path": "late/x.txt"})
    assert dr.state == "failed"


def _late_commit_fires_the_deferred_sensor(
    sensors: Any, repo: lakefs.Repository, dag: str, conf: dict[str, str], files: dict[str, str]
) -> str:
    """Run the deferred sensor DAG ``lf_sense_<dag>`` while a commit of ``files`` lands; return the commit."""
    made: list[str] = []
    late = lambda: made.append(commit_files(repo, "main", files, "late"))  # noqa: E731
    with after(0.2, late, once=sensor_waits(f"lf_sense_{dag}", "deferred")) as errors:
        dr = run_dag(getattr(sensors, f"{dag}_dag"), {"repository": repo.id, **conf})
    assert not errors
    assert dr.state == "success"
    assert xcoms(dr, "sense")["return_value"] == made[0]
    assert waited_how(dr)["deferred"]
    return made[0]


def test_file_sensor_deferred(sensors: Any, seeded: tuple[lakefs.Repository, str]) -> None:
    repo, _ = seeded
    _late_commit_fires_the_deferred_sensor(sensors, repo, "file_deferred", {"path": "late/x.txt"}, {"late/x.txt": "x"})


def test_prefix_file_sensor_deferred(
    sensors: Any, seeded: tuple[lakefs.Repository, str], lakefence_controls: Any
) -> None:
    repo, _ = seeded
    files = {"tables/t/p0": "0", "tables/t/p1": "1"}
    made = _late_commit_fires_the_deferred_sensor(sensors, repo, "prefix_deferred", {"prefix": "tables/t/"}, files)
    # The same probe, measured alone: two calls whatever the prefix holds.
    from airflow_lakefence.triggers.probes import probe_object

    lakefence_controls.reset_counts()
    assert probe_object(LakeFSHook().client, repository=repo.id, ref="main", path=None, prefix="tables/") == made
    assert lakefence_controls.counts() == {"getCommit": 1, "listObjects": 1}


# -- the adapter methods the sensors added (add-only in lakefs_client.py) --------------------


def test_adapter_diff_refs_stat_and_one_page_listing(
    seeded: tuple[lakefs.Repository, str], lakefence_controls: Any
) -> None:
    from airflow_lakefence.exceptions import LakeFSNotFoundError

    repo, seed = seeded
    files = {f"t/p{i}": str(i) for i in range(5)}
    after_commit = commit_files(repo, "main", {**files, "u/x": "x"}, "five parts")
    client = LakeFSHook().client
    lakefence_controls.reset_counts()
    assert [c.path for c in client.diff_refs(repo.id, seed, after_commit, prefix="t/", limit=2)] == ["t/p0", "t/p1"]
    assert len(client.diff_refs(repo.id, seed, after_commit)) == 6
    assert client.diff_refs(repo.id, seed, seed, prefix="t/", limit=1) == []
    assert client.list_objects_page(repo.id, after_commit, "t/", amount=1) == ["t/p0"]
    assert client.list_objects_page(repo.id, after_commit, "none/") == []
    info = client.stat_object(repo.id, after_commit, "t/p3")
    assert info.path == "t/p3" and info.size_bytes == 1 and info.checksum
    assert lakefence_controls.counts() == {"diffRefs": 3, "listObjects": 2, "statObject": 1}
    with pytest.raises(LakeFSNotFoundError):
        client.stat_object(repo.id, seed, "t/p3")
    with pytest.raises(ValueError, match="diff_type"):
        client.diff_refs(repo.id, seed, after_commit, diff_type="one_dot")
    with pytest.raises(ValueError, match="limit"):
        client.diff_refs(repo.id, seed, after_commit, limit=0)
    created = client.get_commit(repo.id, after_commit).creation_date
    assert created is not None and abs(created - __import__("time").time()) < 600


def test_adapter_diff_refs_follows_pagination(seeded: tuple[lakefs.Repository, str], lakefence_controls: Any) -> None:
    repo, seed = seeded
    ref = repo.branch("main")
    # More than one 1,000-entry page; uploaded concurrently (set-up, not what is measured).
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda i: ref.object(f"many/{i:05d}").upload(b"x", pre_sign=False), range(1005)))
    head = ref.commit("many").get_commit().id
    client = LakeFSHook().client
    lakefence_controls.reset_counts()
    assert len(client.diff_refs(repo.id, seed, head, limit=2000)) == 1005
    assert lakefence_controls.counts() == {"diffRefs": 2}
