// The "lakeFS publications" view: one row per try, newest run first, read from the plugin's JSON API,
// with the same columns as the server-rendered page (airflow_lakefence/ui/app.py, render_page).
import { useEffect, useRef, useState, type FormEvent, type ReactNode } from "react";

import { ApiError, DECISIONS, fetchPage, type Page, type Query, type Row } from "./api";
import { STYLE } from "./style";

/** What the Airflow UI passes a plugin's React app: the route's parameters. */
export interface PublicationsViewProps {
  dagId?: string;
  runId?: string;
  taskId?: string;
  mapIndex?: string;
}

interface Filters {
  dag_id: string;
  task_id: string;
  repository: string;
  branch: string;
  decision: string;
}

const NO_FILTERS: Filters = { dag_id: "", task_id: "", repository: "", branch: "", decision: "" };
const FILTER_NAMES = Object.keys(NO_FILTERS) as (keyof Filters)[];
const PAGE_SIZES = [10, 20, 50, 100];
const DEFAULT_LIMIT = 20;

interface Position {
  filters: Filters;
  offset: number;
  limit: number;
}

const whole = (value: string | null, fallback: number, low: number, high: number): number => {
  const found = Number(value ?? Number.NaN);
  return Number.isInteger(found) && found >= low && found <= high ? found : fallback;
};

/** The view's parameters in the page's URL are prefixed: the host's pages have query parameters of their own. */
const PREFIX = "lf_";

/** The filters and page the page's URL names (a shared link opens the same rows). */
function positionInUrl(): Position {
  const query = new URLSearchParams(window.location.search);
  const filters = { ...NO_FILTERS };
  for (const name of FILTER_NAMES) filters[name] = query.get(PREFIX + name) ?? "";
  return {
    filters,
    offset: whole(query.get(`${PREFIX}offset`), 0, 0, Number.MAX_SAFE_INTEGER),
    limit: whole(query.get(`${PREFIX}limit`), DEFAULT_LIMIT, 1, 100),
  };
}

/** Keep the URL's query in step with the view, in place: the host's router keeps its own history state. */
function showInUrl({ filters, offset, limit }: Position): void {
  const url = new URL(window.location.href);
  for (const name of FILTER_NAMES) {
    if (filters[name]) url.searchParams.set(PREFIX + name, filters[name]);
    else url.searchParams.delete(PREFIX + name);
  }
  for (const [name, value, fallback] of [
    ["offset", offset, 0],
    ["limit", limit, DEFAULT_LIMIT],
  ] as const) {
    if (value !== fallback) url.searchParams.set(PREFIX + name, String(value));
    else url.searchParams.delete(PREFIX + name);
  }
  if (url.href !== window.location.href) window.history.replaceState(window.history.state, "", url);
}
const HEADERS = [
  "DAG",
  "Run",
  "Task",
  "Try",
  "Decision",
  "Target",
  "Input",
  "Staged",
  "Published",
  "Replaced / superseded",
  "Now",
  "Scope",
  "Evidence kept",
];

const label = (decision: string): string => decision.replaceAll("_", " ");

function Commit({ sha, url }: { sha?: string | null; url?: string }): ReactNode {
  if (!sha) return null;
  const short = <code>{sha.slice(0, 12)}</code>;
  if (!url) return <span title={sha}>{short}</span>;
  return (
    <a href={url} target="_blank" rel="noopener noreferrer" title={sha}>
      {short}
    </a>
  );
}

function Replaced({ row }: { row: Row }): ReactNode {
  const parts: ReactNode[] = [];
  if (row.replaced) {
    const previous = typeof row.replaced.output_ref === "string" ? row.replaced.output_ref : null;
    const number = row.replaced.try_number;
    const what = row.replaced.abandoned ? "the abandoned publication of try" : "try";
    parts.push(
      <div key="replaced">
        {number ? `replaced ${what} ${String(number)}: ` : "replaced an abandoned publication: "}
        <Commit sha={previous} url={row.links.replaced} />
      </div>,
    );
  } else if (row.decision === "replace") {
    parts.push(<div key="replaced">replaced an abandoned publication</div>);
  }
  if (row.superseded_by !== null && row.superseded_by !== undefined) {
    parts.push(<div key="superseded">superseded by try {row.superseded_by}</div>);
  }
  if (row.found_by) {
    parts.push(
      <div key="found" className="lf-muted">
        left on the target, found by the {row.found_by === "replacing try" ? "replacing try's record" : "sensor's probe"}
      </div>,
    );
  }
  return parts;
}

/** A run-branch publication: the run branch it published and the run's task attempts inside it. */
function RunBranch({ row }: { row: Row }): ReactNode {
  if (!row.run_branch) return null;
  return (
    <div className="run">
      run branch{" "}
      {row.links.run_branch ? (
        <a href={row.links.run_branch} target="_blank" rel="noopener noreferrer">
          {row.run_branch}
        </a>
      ) : (
        row.run_branch
      )}
      {row.run_tasks.map((task) => (
        <div
          key={`${task.dag_id}|${task.task_id}|${task.map_index}|${task.try_number}`}
          className="run-task"
          data-task={task.task_id}
          data-try={task.try_number ?? ""}
        >
          {task.task_id}
          {task.map_index >= 0 && ` [${task.map_index}]`}
          {task.try_number !== null && ` try ${task.try_number}`}:{" "}
          {task.commits.map((commit) => (
            <span key={commit}>
              <Commit sha={commit} url={row.links[`run_task:${commit}`]} />{" "}
            </span>
          ))}
        </div>
      ))}
      {row.run_tasks_truncated && <span className="lf-muted">(newest shown)</span>}
    </div>
  );
}

function Scope({ row }: { row: Row }): ReactNode {
  return (
    <>
      {row.output_prefixes.length ? row.output_prefixes.join(", ") : "whole branch"}
      {row.input_prefixes.length > 0 && <div className="lf-muted">reads {row.input_prefixes.join(", ")}</div>}
    </>
  );
}

function EvidenceList({ row }: { row: Row }): ReactNode {
  return row.evidence.map((entry) => {
    const url = row.links[`evidence:${entry.branch}`];
    return (
      <div key={entry.branch}>
        {entry.kept && url ? (
          <a href={url} target="_blank" rel="noopener noreferrer">
            {entry.branch}
          </a>
        ) : (
          <span className="lf-muted">
            {entry.branch}
            {entry.kept ? "" : " (deleted)"}
          </span>
        )}{" "}
        <b>{entry.error}</b>
        {entry.message && <div className="lf-message">{entry.message}</div>}
      </div>
    );
  });
}

const shown = (value: unknown): string => {
  if (typeof value === "string") return value;
  if (Array.isArray(value) && value.every((v) => typeof v !== "object" || v === null)) return value.join(", ");
  return JSON.stringify(value);
};

/** Fields the API added after this view was built: shown as they come, so nothing it sends is hidden. */
function Extra({ row }: { row: Row }): ReactNode {
  const fields = Object.entries(row.extra).filter(
    ([, value]) => value !== null && value !== undefined && value !== "" && !(Array.isArray(value) && !value.length),
  );
  if (!fields.length) return null;
  return (
    <details className="lf-extra">
      <summary>more</summary>
      <dl>
        {fields.map(([key, value]) => (
          <div key={key}>
            <dt>{label(key)}</dt>
            <dd>{shown(value)}</dd>
          </div>
        ))}
      </dl>
    </details>
  );
}

function PublicationRow({ row }: { row: Row }): ReactNode {
  const judgement = row.judgement_label;
  return (
    <tr
      className="publication"
      data-decision={row.decision}
      data-try={row.try_number}
      data-run={row.run_id}
      data-task={row.task_id}
      data-map-index={row.map_index}
      data-output={row.output_ref ?? ""}
    >
      <td>{row.dag_id}</td>
      <td>{row.run_id}</td>
      <td>
        {row.task_id}
        {row.map_index >= 0 && ` [${row.map_index}]`}
      </td>
      <td>{row.current ? <b title="the task instance's latest try">{row.try_number}</b> : row.try_number}</td>
      <td className="decision">
        <span className={`lf-d-${row.decision}`}>{label(row.decision)}</span>
        <div className="lf-reason">{row.reason}</div>
        <RunBranch row={row} />
      </td>
      <td>
        {row.repository}@{row.target_branch}
      </td>
      <td>
        <Commit sha={row.input_commit} url={row.links.input_commit} />
        {row.input_ref && <div className="lf-muted">{row.input_ref}</div>}
      </td>
      <td className="staged">
        <Commit sha={row.staged_commit} url={row.links.staged_commit} />
      </td>
      <td className="published">
        <Commit sha={row.output_ref} url={row.links.output_ref} />
        {row.links.compare && (
          <>
            {" "}
            <a className="compare" href={row.links.compare} target="_blank" rel="noopener noreferrer">
              diff
            </a>
          </>
        )}
      </td>
      <td className="replaced">
        <Replaced row={row} />
      </td>
      <td className="judgement">
        {judgement && (
          <span className={`lf-j-${judgement.replaceAll(" ", "-")}`} title={row.judgement_reason ?? ""}>
            {judgement}
          </span>
        )}
      </td>
      <td>
        <Scope row={row} />
      </td>
      <td className="evidence">
        <EvidenceList row={row} />
        <Extra row={row} />
      </td>
    </tr>
  );
}

function scopeOf({ dagId, runId, taskId, mapIndex }: PublicationsViewProps): string {
  if (!dagId) return "every DAG you may read";
  let scope = `DAG ${dagId}`;
  if (taskId) scope += `, task ${taskId}${mapIndex !== undefined && mapIndex !== "-1" ? ` [${mapIndex}]` : ""}`;
  if (runId) scope += `, run ${runId}`;
  return scope;
}

/** The view the plugin's react_apps register (see main.tsx). */
export function PublicationsView(props: PublicationsViewProps): ReactNode {
  const { dagId, runId, taskId, mapIndex } = props;
  const [start] = useState(positionInUrl);
  const [draft, setDraft] = useState<Filters>(start.filters);
  const [filters, setFilters] = useState<Filters>(start.filters);
  const [offset, setOffset] = useState(start.offset);
  const [limit, setLimit] = useState(start.limit);
  const [reloads, setReloads] = useState(0);
  // The offsets of the pages seen before this one: a page filtered by decision may read further than
  // its limit, so "newer" goes back to where the previous page started.
  const [trail, setTrail] = useState<number[]>([]);
  const [page, setPage] = useState<Page | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [loading, setLoading] = useState(true);

  // The UI keeps the component when one moves to another task instance: start at its first page.
  const scope = `${dagId}|${runId}|${taskId}|${mapIndex}`;
  const shownScope = useRef(scope);
  useEffect(() => {
    if (shownScope.current !== scope) {
      shownScope.current = scope;
      setOffset(0);
      setTrail([]);
    }
  }, [scope]);
  useEffect(() => showInUrl({ filters, offset, limit }), [filters, offset, limit]);

  useEffect(() => {
    const controller = new AbortController();
    const query: Query = {
      dag_id: dagId ?? filters.dag_id,
      task_id: taskId ?? filters.task_id,
      run_id: runId,
      map_index: mapIndex,
      repository: filters.repository,
      branch: filters.branch,
      decision: filters.decision,
      offset,
      limit,
    };
    setLoading(true);
    fetchPage(query, controller.signal)
      .then((found) => {
        setPage(found);
        setError(null);
      })
      .catch((reason: unknown) => {
        if (controller.signal.aborted) return;
        setPage(null);
        setError(reason instanceof ApiError ? reason.message : String(reason));
      })
      .finally(() => {
        if (!controller.signal.aborted) setLoading(false);
      });
    return () => controller.abort();
  }, [dagId, runId, taskId, mapIndex, filters, offset, limit, reloads]);

  const apply = (event: FormEvent) => {
    event.preventDefault();
    setOffset(0);
    setTrail([]);
    setFilters(draft);
  };
  const clear = () => {
    setDraft(NO_FILTERS);
    setFilters(NO_FILTERS);
    setOffset(0);
    setTrail([]);
  };
  const field = (name: keyof Filters, placeholder: string) => (
    <input
      aria-label={placeholder}
      name={name}
      placeholder={placeholder}
      value={draft[name]}
      onChange={(event) => setDraft({ ...draft, [name]: event.target.value })}
    />
  );

  const total = page?.total ?? 0;
  const first = total ? offset + 1 : 0;
  const last = Math.min(offset + (page?.scanned ?? limit), total);
  // The server's next page where it says (it may have read past the limit), else the next limit's worth.
  const next = page?.nextOffset !== undefined ? page.nextOffset : offset + limit < total ? offset + limit : null;
  const older = () => {
    if (next === null) return;
    setTrail([...trail, offset]);
    setOffset(next);
  };
  const newer = () => {
    setOffset(trail.length ? trail[trail.length - 1] : Math.max(0, offset - limit));
    setTrail(trail.slice(0, -1));
  };
  return (
    <div className="lf-view" data-testid="lakefence-publications">
      <style>{STYLE}</style>
      <h2>lakeFS publications</h2>
      <div className="lf-muted">{scopeOf(props)}</div>
      <form className="lf-bar" onSubmit={apply}>
        {dagId === undefined && field("dag_id", "DAG")}
        {taskId === undefined && field("task_id", "task")}
        {field("repository", "repository")}
        {field("branch", "branch")}
        <select
          aria-label="decision"
          name="decision"
          value={draft.decision}
          onChange={(event) => setDraft({ ...draft, decision: event.target.value })}
        >
          <option value="">any decision</option>
          {DECISIONS.map((decision) => (
            <option key={decision} value={decision}>
              {label(decision)}
            </option>
          ))}
        </select>
        <button type="submit">Filter</button>
        <button type="button" onClick={clear}>
          Clear
        </button>
      </form>
      <div className="lf-bar">
        <span className="lf-summary" data-total={total}>
          Task instances {first}-{last} of {total}, newest run first
          {page?.calls !== null && page?.calls !== undefined && (
            <>
              ; read from lakeFS in {page.calls} calls
              {page.bound !== null && ` (at most ${page.bound})`}
            </>
          )}
          {loading && " · loading…"}
        </span>
        <button type="button" disabled={offset === 0} onClick={newer}>
          Newer
        </button>
        <button type="button" disabled={next === null || loading} onClick={older}>
          Older
        </button>
        <select
          aria-label="task instances per page"
          value={limit}
          onChange={(event) => {
            setOffset(0);
            setTrail([]);
            setLimit(Number(event.target.value));
          }}
        >
          {[...new Set([...PAGE_SIZES, limit])].sort((a, b) => a - b).map((size) => (
            <option key={size} value={size}>
              {size} per page
            </option>
          ))}
        </select>
        <button type="button" onClick={() => setReloads(reloads + 1)}>
          Refresh
        </button>
      </div>
      {error && (
        <p className="lf-error" role="alert">
          {error}
        </p>
      )}
      {page &&
        Object.entries(page.errors).map(([key, message]) => (
          <p key={key} className="lf-error">
            {key}: {message}
          </p>
        ))}
      <div className="lf-scroll">
        <table className="lf-table" id="publications">
          <thead>
            <tr>
              {HEADERS.map((header) => (
                <th key={header}>{header}</th>
              ))}
            </tr>
          </thead>
          <tbody>
            {page?.rows.map((row) => (
              <PublicationRow key={`${row.dag_id}|${row.run_id}|${row.task_id}|${row.map_index}|${row.try_number}`} row={row} />
            ))}
          </tbody>
        </table>
      </div>
      {page && !page.rows.length && !loading && <p className="lf-muted">No publications match.</p>}
    </div>
  );
}
