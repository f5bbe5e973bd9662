"""One validator for a publication's arguments (``PublishRequest.validated``), called at both moments.

Every bad value of every parameter is refused when the DAG file is parsed (the operator's
constructor) if it is known then; the same value passed as a template, rendered only in the try,
is refused by the running task with the same exception and the same message, before the lakeFS
connection is read.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from airflow.sdk import DAG

from airflow_lakefence.core.request import PublishRequest
from airflow_lakefence.core.staging.delta_tables import DeltaTableOutput
from airflow_lakefence.exceptions import InputRefError, InvalidInputError, LakeFenceError, PublishBudgetError
from airflow_lakefence.operators import FencedPythonPublishOperator, FencedSparkPublishOperator, PublishOptions
from airflow_lakefence.operators.fenced_base import FENCED_TEMPLATE_FIELDS, OPTION_NAMES

BASE: dict[str, Any] = {"task_id": "t", "repository": "lake", "target_branch": "main", "input_ref": "main"}
TABLE = DeltaTableOutput("tables/events")

#: (parameter, bad value, extra arguments, exception): each refused at parse time.
BAD: list[tuple[str, Any, dict[str, Any], type[LakeFenceError]]] = [
    ("repository", "My_Repo", {}, InvalidInputError),
    ("repository", "", {}, InvalidInputError),
    ("repository", "r" * 70, {}, InvalidInputError),
    ("repository", 7, {}, InvalidInputError),
    ("target_branch", "feature/new data", {}, InvalidInputError),
    ("target_branch", "", {}, InvalidInputError),
    ("target_branch", "b" * 300, {}, InvalidInputError),
    ("input_ref", "main branch", {}, InputRefError),
    ("input_ref", "", {}, InputRefError),
    ("input_ref", {"commit": "c"}, {}, InputRefError),
    ("write_mode", "workspcae", {}, InvalidInputError),
    ("output_mode", "replcae", {}, InvalidInputError),
    ("hard_fence", "requir", {}, InvalidInputError),
    ("fence_scope", "prefix", {}, InvalidInputError),
    ("read_only", "yes", {}, InvalidInputError),
    ("read_only", True, {"output_prefixes": ["out/"]}, InvalidInputError),
    ("read_only", True, {"commit_message": "m"}, InvalidInputError),
    ("read_only", True, {"commit_metadata": {"k": "v"}}, InvalidInputError),
    ("read_only", True, {"publish_budget": 1}, InvalidInputError),
    ("read_only", True, {"fence_scope": "prefixes", "output_prefixes": ["a/"]}, InvalidInputError),
    ("read_only", True, {"output_tables": [TABLE], "write_mode": "direct"}, InvalidInputError),
    ("allow_empty_workspace", "no", {}, InvalidInputError),
    ("replace_by_merge", 1, {}, InvalidInputError),
    ("commit_message", 7, {}, InvalidInputError),
    ("commit_metadata", {"lakefence.role": "x"}, {}, InvalidInputError),
    ("commit_metadata", {".lakefs.x": "x"}, {}, InvalidInputError),
    ("commit_metadata", {"owner": 7}, {}, InvalidInputError),
    ("staging_branch_prefix", "bad prefix", {}, InvalidInputError),
    ("staging_branch_prefix", "", {}, InvalidInputError),
    ("workspace_dir", "", {}, InvalidInputError),
    ("workspace_dir", 7, {}, InvalidInputError),
    ("workspace_check", "not a callable", {}, InvalidInputError),
    ("publish_budget", -1, {}, InvalidInputError),
    ("publish_budget", timedelta(minutes=5), {"execution_timeout": timedelta(minutes=5)}, PublishBudgetError),
    ("stale_grace_period", -1, {}, InvalidInputError),
    ("output_prefixes", "out/", {}, InvalidInputError),
    ("output_prefixes", ["/"], {}, InvalidInputError),
    ("output_prefixes", [7], {}, InvalidInputError),
    ("output_prefixes", ["a/", "a/b/"], {"fence_scope": "prefixes"}, InvalidInputError),
    ("output_prefixes", ["/abs/"], {"fence_scope": "prefixes"}, InvalidInputError),
    ("output_prefixes", ["lakefs://lake/main/a/"], {"fence_scope": "prefixes"}, InvalidInputError),
    ("output_prefixes", None, {"fence_scope": "prefixes"}, InvalidInputError),
    ("input_prefixes", ["a/"], {}, InvalidInputError),
    ("input_prefixes", ["../x/"], {"fence_scope": "prefixes", "output_prefixes": ["a/"]}, InvalidInputError),
    ("input_prefixes", "x/", {"fence_scope": "prefixes", "output_prefixes": ["a/"]}, InvalidInputError),
    ("output_tables", "tables/events", {"write_mode": "direct"}, InvalidInputError),
    ("output_tables", [TABLE], {}, InvalidInputError),
    ("output_tables", [""], {"write_mode": "direct"}, InvalidInputError),
    ("output_tables", ["t/a", "t/a/b"], {"write_mode": "direct"}, InvalidInputError),
    ("output_tables", [TABLE], {"write_mode": "direct", "output_prefixes": ["tables/"]}, InvalidInputError),
]
IDS = [f"{name}={value!r}{'+' + ','.join(extra) if extra else ''}"[:80] for name, value, extra, _ in BAD]
#: The parameters the operator renders (Jinja) before the try: a templated bad value is refused in the try.
TEMPLATED = frozenset(FENCED_TEMPLATE_FIELDS)


def _grouped(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The expert knobs inside ``options``, as a DAG author passes them."""
    knobs = {k: kwargs.pop(k) for k in list(kwargs) if k in OPTION_NAMES}
    return {**kwargs, "options": PublishOptions(**knobs)} if knobs else kwargs


def _spark(**kwargs: Any) -> FencedSparkPublishOperator:
    return FencedSparkPublishOperator(application="job.py", **_grouped({**BASE, **kwargs}))


def _python(**kwargs: Any) -> FencedPythonPublishOperator:
    return FencedPythonPublishOperator(python_callable=lambda: None, **_grouped({**BASE, **kwargs}))


def _refusal(build: Any, kwargs: dict[str, Any], error: type[LakeFenceError]) -> str:
    with pytest.raises(error) as info:
        build(**kwargs)
    assert type(info.value) is error or error is InvalidInputError
    return str(info.value)


@pytest.mark.parametrize(("name", "value", "extra", "error"), BAD, ids=IDS)
@pytest.mark.parametrize("build", [_spark, _python], ids=["spark", "python"])
def test_every_bad_value_is_refused_when_the_dag_is_parsed(
    build: Any, name: str, value: Any, extra: dict[str, Any], error: type[LakeFenceError]
) -> None:
    message = _refusal(build, {**extra, name: value}, error)
    assert name in message or any(key in message for key in extra), message


@pytest.mark.parametrize(
    ("name", "value", "extra", "error"),
    [b for b in BAD if b[0] in TEMPLATED],
    ids=[i for i, b in zip(IDS, BAD, strict=True) if b[0] in TEMPLATED],
)
def test_a_templated_bad_value_is_refused_in_the_try_with_the_same_error(
    name: str, value: Any, extra: dict[str, Any], error: type[LakeFenceError]
) -> None:
    at_parse_time = _refusal(_spark, {**extra, name: value}, error)
    template: Any = "{{ bad }}"
    if name == "output_tables" and isinstance(value, list) and value and isinstance(value[0], DeltaTableOutput):
        template = [DeltaTableOutput("{{ bad }}")]
        value = value[0].root
    with DAG("validator", schedule=None, render_template_as_native_obj=True):  # conf values keep their types
        operator = _spark(**{**extra, name: template})  # accepted: only the try knows the value
    context: dict[str, Any] = {"bad": value}
    operator.render_template_fields(context)
    assert operator.options.workspace_dir != value or name != "workspace_dir"  # a shared options object stays as given
    with pytest.raises(error) as info:
        operator.execute(context)  # refused before the lakeFS connection or the attempt fence is touched
    assert str(info.value) == at_parse_time


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"s3a": "yes"}, "s3a must be True or False"),
        ({"spark_log_level": "VERBOSE"}, "spark_log_level must be one of"),
        ({"spark_log_level": 3}, "spark_log_level must be one of"),
        ({"kubernetes_credentials_secret": "Not_A_Name"}, "not a valid Kubernetes Secret name"),
    ],
)
def test_the_spark_arguments_are_refused_when_the_dag_is_parsed(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        _spark(**kwargs)


@pytest.mark.parametrize(("name", "value", "extra", "error"), [b for b in BAD if b[0] in OPTION_NAMES])
def test_the_old_one_by_one_spelling_of_a_knob_is_checked_the_same(
    name: str, value: Any, extra: dict[str, Any], error: type[LakeFenceError]
) -> None:
    expected = _refusal(_spark, {**extra, name: value}, error)
    with pytest.warns(DeprecationWarning), pytest.raises(error) as info:
        FencedSparkPublishOperator(application="job.py", **BASE, **extra, **{name: value})
    assert str(info.value) == expected


def test_the_operator_and_the_engine_call_the_same_validator(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[bool] = []
    original = PublishRequest.validated

    def spy(self: PublishRequest, *, parse_time: bool = False) -> PublishRequest:
        calls.append(parse_time)
        return original(self, parse_time=parse_time)

    monkeypatch.setattr(PublishRequest, "validated", spy)
    _spark(output_prefixes=["out/"])
    assert calls == [True]


def test_good_templated_values_pass_at_parse_time() -> None:
    operator = _spark(
        repository="{{ dag_run.conf['repository'] }}",
        output_prefixes=["tables/t/date={{ ds }}/"],
        fence_scope="prefixes",
        input_prefixes="{{ dag_run.conf['reads'] }}",
        commit_metadata={"run": "{{ run_id }}"},
        output_tables=[DeltaTableOutput("{{ dag_run.conf['table'] }}")],
        write_mode="direct",
    )
    assert operator.fence_scope == "prefixes"


def test_a_bad_value_is_a_dag_import_error_naming_it(tmp_path: Any) -> None:
    from airflow.models.dagbag import DagBag

    (tmp_path / "bad_dag.py").write_text(
        "from airflow.sdk import DAG\n"
        "from airflow_lakefence.operators import FencedSparkPublishOperator\n"
        "with DAG('bad', schedule=None):\n"
        "    FencedSparkPublishOperator(task_id='t', application='a.py', repository='lake',\n"
        "                               target_branch='main', output_mode='replcae')\n"
    )
    bag = DagBag(dag_folder=str(tmp_path))
    (error,) = bag.import_errors.values()
    assert "InvalidInputError" in error and "output_mode must be 'replace' or 'upsert', got 'replcae'" in error
