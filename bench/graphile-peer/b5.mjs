// B5 peer: graphile-worker 0.16 (npm), driven by takt-bench's `b5` as a child process.
//
// `node b5.mjs push URL N`: runs graphile-worker's migrations and adds N jobs of the task
// `noop`, all due now, in one statement (not timed). Prints {"pushed": N}.
// `node b5.mjs drain URL N CONCURRENCY`: one runner with CONCURRENCY workers and graphile's
// defaults otherwise (LISTEN/NOTIFY, poll interval 2 s, one job per fetch; the per-job log
// line silenced); its `noop` task
// counts itself, and the runner is stopped after the N-th body. Prints one JSON line with
// `runs`, `body_secs` (from starting the runner to the N-th body) and `drain_secs` (until it
// stopped).
import { Logger, makeWorkerUtils, run } from "graphile-worker";

// Silent: graphile logs a line per completed job by default; takt logs nothing per run.
const logger = new Logger(() => () => {});

const [phase, url, nText, concurrencyText] = process.argv.slice(2);
const n = Number(nText);
if (!url || !Number.isInteger(n) || !["push", "drain"].includes(phase)) {
  console.error("usage: node b5.mjs push|drain URL N [CONCURRENCY]");
  process.exit(2);
}

if (phase === "push") {
  const utils = await makeWorkerUtils({ connectionString: url, logger });
  await utils.migrate();
  await utils.withPgClient((c) =>
    c.query(
      "SELECT graphile_worker.add_job('noop', json_build_object('i', g)) " +
        "FROM generate_series(1, $1) g",
      [n],
    ),
  );
  await utils.release();
  console.log(JSON.stringify({ pushed: n }));
} else {
  const concurrency = Number(concurrencyText ?? "10");
  let done = 0;
  let lastBody = null;
  let finished;
  const allDone = new Promise((resolve) => {
    finished = resolve;
  });
  const start = process.hrtime.bigint();
  const runner = await run({
    connectionString: url,
    concurrency,
    noHandleSignals: true,
    logger,
    taskList: {
      noop: async () => {
        done += 1;
        if (done === n) {
          lastBody = process.hrtime.bigint();
          finished();
        }
      },
    },
  });
  await allDone;
  await runner.stop();
  const end = process.hrtime.bigint();
  console.log(
    JSON.stringify({
      runs: done,
      body_secs: Number(lastBody - start) / 1e9,
      drain_secs: Number(end - start) / 1e9,
      concurrency,
    }),
  );
}
