// The view is a library bundle the Airflow UI imports at run time (a plugin's react_app): one UMD file
// that sets globalThis.AirflowPlugin to the view's component, with React and its JSX runtime taken from
// the globals the host UI sets (Airflow 3.1 to 3.3 set React, ReactDOM, ReactJSXRuntime and
// ReactRouterDOM; 3.2 and 3.3 add Chakra UI, 3.1 does not, so the view draws with plain elements and the host's CSS
// variables). The output goes into the Python package (../static), where the plugin serves it; set
// LAKEFENCE_BUNDLE_OUT to build elsewhere (the reproducibility check compares such a build with it).
import { resolve } from "node:path";
import { defineConfig } from "vite";

const outDir = process.env.LAKEFENCE_BUNDLE_OUT ?? resolve(import.meta.dirname, "..", "static");

export default defineConfig({
  logLevel: "warn",
  define: { "process.env.NODE_ENV": JSON.stringify("production") },
  oxc: { jsx: { runtime: "automatic" } },
  build: {
    outDir,
    emptyOutDir: false,
    copyPublicDir: false,
    reportCompressedSize: false,
    sourcemap: false,
    target: "es2022",
    lib: {
      entry: resolve(import.meta.dirname, "src", "main.tsx"),
      formats: ["umd"],
      name: "AirflowPlugin",
      fileName: () => "publications.js",
    },
    rolldownOptions: {
      external: ["react", "react/jsx-runtime"],
      output: {
        globals: { react: "React", "react/jsx-runtime": "ReactJSXRuntime" },
      },
    },
  },
});
