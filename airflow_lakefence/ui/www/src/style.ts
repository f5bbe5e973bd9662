// The view's styles, scoped by the "lf-" prefix. Colours come from the host UI's Chakra CSS variables
// (so light and dark mode follow Airflow's), with fallbacks for a page without them.
const fg = "var(--chakra-colors-fg, #1a202c)";
const muted = "var(--chakra-colors-fg-muted, #718096)";
const border = "var(--chakra-colors-border, #e2e8f0)";
const subtle = "var(--chakra-colors-bg-subtle, #f7fafc)";
const good = "var(--chakra-colors-fg-success, #22543d)";
const bad = "var(--chakra-colors-fg-error, #9b2c2c)";
const info = "var(--chakra-colors-fg-info, #2b6cb0)";

export const STYLE = `
.lf-view{color:${fg};font-size:13px;padding:8px 4px}
.lf-view h2{font-size:18px;font-weight:600;margin:0 0 4px}
.lf-view a{color:${info};text-decoration:underline}
.lf-view code{font-family:ui-monospace,monospace;font-size:12px}
.lf-bar{display:flex;flex-wrap:wrap;gap:8px;align-items:center;margin:8px 0}
.lf-bar input,.lf-bar select,.lf-bar button{font:inherit;color:inherit;background:transparent;
border:1px solid ${border};border-radius:4px;padding:3px 6px}
.lf-bar input{width:11em}
.lf-bar button{cursor:pointer}.lf-bar button:disabled{cursor:default;opacity:.5}
.lf-scroll{overflow-x:auto}
.lf-table{border-collapse:collapse;width:100%}
.lf-table th,.lf-table td{border-bottom:1px solid ${border};padding:4px 6px;text-align:left;vertical-align:top}
.lf-table th{background:${subtle};font-weight:600;white-space:nowrap}
.lf-muted{color:${muted}}.lf-reason{color:${muted};font-size:12px;max-width:26em}
.lf-message{color:${muted};font-size:12px;max-width:40em;overflow-wrap:anywhere}
.lf-view .run{margin-top:4px;font-size:12px}.lf-view .run-task{margin-left:8px}
.lf-d-merge,.lf-d-replace,.lf-d-relocate,.lf-d-idempotent,.lf-d-noop{color:${good};font-weight:600}
.lf-d-fail_closed{color:${bad};font-weight:600}.lf-d-unreported{color:${muted};font-weight:600}
.lf-j-live{color:${good};font-weight:600}.lf-j-abandoned{color:${bad};font-weight:600}
.lf-error{color:${bad}}
.lf-extra dt{font-weight:600}.lf-extra dd{margin:0 0 4px 8px}
`;
