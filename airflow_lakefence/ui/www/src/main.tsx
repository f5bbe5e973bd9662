// The entry of the bundle the Airflow UI loads for the plugin's react_apps: its default export is the
// component the UI draws on the task instance, the task, the DAG and the "Browse" page, with the route's
// dagId, runId, taskId and mapIndex as props (undefined where the route has none).
import { PublicationsView } from "./view";

export default PublicationsView;
