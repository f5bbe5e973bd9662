// The view's data: GET <Airflow base>/lakefence/api/publications (airflow_lakefence/ui/app.py), with the
// user's Airflow session. The Airflow UI keeps its login in the "_token" cookie and the API server's
// get_user reads it (3.1 to 3.3), so a same-origin request carries the user's identity and the app
// answers 401 without it and 403 for a DAG the user may not read. Every field is read defensively:
// the API gains fields over time and an older server may lack some.

/** Where the API server mounts the plugin's app (airflow_lakefence.ui.URL_PREFIX, without its slash). */
export const APP_PATH = "lakefence";

export interface Evidence {
  branch: string;
  error: string;
  kept: boolean;
  head?: string | null;
  /** The error's message as the run state kept it (redacted, one line), where the server sends it. */
  message?: string | null;
}

/** A run's task attempt whose commits a run-branch publication published. */
export interface RunTask {
  dag_id: string;
  run_id: string;
  task_id: string;
  map_index: number;
  try_number: number | null;
  commits: string[];
}

export interface Row {
  dag_id: string;
  run_id: string;
  task_id: string;
  map_index: number;
  try_number: number;
  repository: string;
  target_branch: string;
  decision: string;
  reason: string;
  input_commit?: string | null;
  input_ref?: string | null;
  output_ref?: string | null;
  staged_commit?: string | null;
  replaced?: { output_ref?: unknown; try_number?: unknown; abandoned?: unknown } | null;
  superseded_by?: number | null;
  judgement?: string | null;
  judgement_label?: string | null;
  judgement_reason?: string | null;
  output_prefixes: string[];
  input_prefixes: string[];
  evidence: Evidence[];
  current?: boolean;
  /** For an unreported try whose abandoned publication is named: who found it. */
  found_by?: string | null;
  run_branch?: string | null;
  run_head?: string | null;
  run_tasks: RunTask[];
  run_tasks_truncated: boolean;
  links: Record<string, string>;
  /** Fields this version of the view does not know, shown as they come. */
  extra: Record<string, unknown>;
}

export interface Page {
  rows: Row[];
  total: number;
  offset: number;
  limit: number;
  /** Where the next page starts (``null``: none); ``undefined`` from a server that does not say. */
  nextOffset?: number | null;
  /** Task instances the server read for the page (more than the page's when a decision filters). */
  scanned?: number;
  calls: number | null;
  bound: number | null;
  errors: Record<string, string>;
}

/** The decisions a row can show (core/publication/history.py, DECISION_REASONS). */
export const DECISIONS = ["merge", "replace", "relocate", "idempotent", "noop", "fail_closed", "unreported"];

export interface Query {
  dag_id?: string;
  run_id?: string;
  task_id?: string;
  map_index?: string;
  repository?: string;
  branch?: string;
  decision?: string;
  offset: number;
  limit: number;
}

const KNOWN = new Set([
  "dag_id",
  "run_id",
  "task_id",
  "map_index",
  "try_number",
  "repository",
  "target_branch",
  "decision",
  "reason",
  "input_commit",
  "input_ref",
  "output_ref",
  "staged_commit",
  "replaced",
  "superseded_by",
  "judgement",
  "judgement_label",
  "judgement_reason",
  "output_prefixes",
  "input_prefixes",
  "evidence",
  "current",
  "found_by",
  "run_branch",
  "run_head",
  "run_tasks",
  "run_tasks_truncated",
  "links",
]);

type Json = Record<string, unknown>;

const isObject = (value: unknown): value is Json =>
  typeof value === "object" && value !== null && !Array.isArray(value);
const text = (value: unknown): string => (value === null || value === undefined ? "" : String(value));
const optionalText = (value: unknown): string | null =>
  value === null || value === undefined || value === "" ? null : String(value);
const numberOr = (value: unknown, fallback: number): number => {
  const found = typeof value === "number" ? value : Number(value);
  return Number.isFinite(found) ? found : fallback;
};
const strings = (value: unknown): string[] => (Array.isArray(value) ? value.map(text) : []);

function evidenceOf(value: unknown): Evidence[] {
  if (!Array.isArray(value)) return [];
  return value.filter(isObject).map((e) => ({
    branch: text(e.branch),
    error: text(e.error),
    kept: e.kept !== false,
    head: optionalText(e.head),
    message: optionalText(e.message),
  }));
}

function runTasksOf(value: unknown): RunTask[] {
  if (!Array.isArray(value)) return [];
  return value.filter(isObject).map((t) => ({
    dag_id: text(t.dag_id),
    run_id: text(t.run_id),
    task_id: text(t.task_id),
    map_index: numberOr(t.map_index, -1),
    try_number: t.try_number === null || t.try_number === undefined ? null : numberOr(t.try_number, 0),
    commits: strings(t.commits),
  }));
}

function linksOf(value: unknown): Record<string, string> {
  const found: Record<string, string> = {};
  if (!isObject(value)) return found;
  for (const [key, url] of Object.entries(value)) {
    // Only web links: a link is an href, and an href from data must never run script.
    if (typeof url === "string" && /^https?:\/\//i.test(url)) found[key] = url;
  }
  return found;
}

/** One row of the API's answer, with defaults for what it lacks. */
export function rowOf(value: Json): Row {
  const extra: Record<string, unknown> = {};
  for (const [key, field] of Object.entries(value)) {
    if (!KNOWN.has(key)) extra[key] = field;
  }
  const superseded = value.superseded_by;
  return {
    dag_id: text(value.dag_id),
    run_id: text(value.run_id),
    task_id: text(value.task_id),
    map_index: numberOr(value.map_index, -1),
    try_number: numberOr(value.try_number, 0),
    repository: text(value.repository),
    target_branch: text(value.target_branch),
    decision: text(value.decision) || "unreported",
    reason: text(value.reason),
    input_commit: optionalText(value.input_commit),
    input_ref: optionalText(value.input_ref),
    output_ref: optionalText(value.output_ref),
    staged_commit: optionalText(value.staged_commit),
    replaced: isObject(value.replaced) ? value.replaced : null,
    superseded_by: superseded === null || superseded === undefined ? null : numberOr(superseded, 0),
    judgement: optionalText(value.judgement),
    judgement_label: optionalText(value.judgement_label ?? value.judgement),
    judgement_reason: optionalText(value.judgement_reason),
    output_prefixes: strings(value.output_prefixes),
    input_prefixes: strings(value.input_prefixes),
    evidence: evidenceOf(value.evidence),
    current: value.current === true,
    found_by: optionalText(value.found_by),
    run_branch: optionalText(value.run_branch),
    run_head: optionalText(value.run_head),
    run_tasks: runTasksOf(value.run_tasks),
    run_tasks_truncated: value.run_tasks_truncated === true,
    links: linksOf(value.links),
    extra,
  };
}

/** The API's URL for a query, under the Airflow UI's base URL (it may be served under a path). */
export function pageUrl(query: Query): string {
  const url = new URL(`${APP_PATH}/api/publications`, document.baseURI);
  for (const [key, value] of Object.entries(query)) {
    if (value !== undefined && value !== "") url.searchParams.set(key, String(value));
  }
  return url.toString();
}

/** The error a refused or failed request reads as. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
  }
}

async function detailOf(answer: Response): Promise<string> {
  try {
    const body: unknown = await answer.json();
    if (isObject(body) && body.detail !== undefined) {
      return typeof body.detail === "string" ? body.detail : JSON.stringify(body.detail);
    }
  } catch {
    // Not JSON: the status says enough.
  }
  return answer.statusText;
}

/** One page of rows, read with the user's session. */
export async function fetchPage(query: Query, signal: AbortSignal): Promise<Page> {
  const answer = await fetch(pageUrl(query), {
    credentials: "same-origin",
    headers: { Accept: "application/json" },
    signal,
  });
  if (!answer.ok) {
    const reason = answer.status === 401 ? "not logged in (log in to Airflow again)" : await detailOf(answer);
    throw new ApiError(answer.status, `${answer.status}: ${reason}`);
  }
  const body: unknown = await answer.json();
  if (!isObject(body)) throw new ApiError(answer.status, "the API answered something that is not a page");
  const errors: Record<string, string> = {};
  if (isObject(body.errors)) {
    for (const [key, value] of Object.entries(body.errors)) errors[key] = text(value);
  }
  return {
    rows: Array.isArray(body.rows) ? body.rows.filter(isObject).map(rowOf) : [],
    total: numberOr(body.total_task_instances, 0),
    offset: numberOr(body.offset, query.offset),
    limit: numberOr(body.limit, query.limit),
    nextOffset: !("next_offset" in body)
      ? undefined
      : body.next_offset === null
        ? null
        : numberOr(body.next_offset, query.offset + query.limit),
    scanned: typeof body.scanned_task_instances === "number" ? body.scanned_task_instances : undefined,
    calls: typeof body.lakefs_calls === "number" ? body.lakefs_calls : null,
    bound: typeof body.lakefs_calls_bound === "number" ? body.lakefs_calls_bound : null,
    errors,
  };
}
