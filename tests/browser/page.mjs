// Drives the system's headless Chromium over a page agentbatch wrote (report.html or
// compare.html, opened from file://) and prints what it saw as one JSON object; the
// Rust tests (tests/integration/report_page.rs) assert on it.
//
//   node tests/browser/page.mjs --chromium /usr/bin/chromium --page DIR/report.html
//        [--mode report|layout] [--open TASK,TASK] [--text SUBSTRING] [--widths 1280,1024]
//        [--screenshot OUT.png]
//
// report mode: console errors, failed requests, chart bars, the count after each
// outcome/stop/team filter and after a text filter, costs after sorting by cost, and,
// with --open, the transcript's four stages. layout mode: scroll widths per width.
import puppeteer from "puppeteer-core";

const args = {};
for (let i = 2; i < process.argv.length; i += 2) args[process.argv[i].replace(/^--/, "")] = process.argv[i + 1];
const mode = args.mode || "report";
const widths = (args.widths || "1280").split(",").map(Number);

const browser = await puppeteer.launch({
  executablePath: args.chromium,
  headless: true,
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"],
});
const out = { console: [], pageErrors: [], failedRequests: [], requests: [], dialogs: [] };
try {
  const page = await browser.newPage();
  page.on("console", (m) => { if (m.type() === "error" || m.type() === "warn") out.console.push(m.type() + ": " + m.text()); });
  page.on("pageerror", (e) => out.pageErrors.push(String(e)));
  page.on("requestfailed", (r) => out.failedRequests.push(r.url() + " " + (r.failure() ? r.failure().errorText : "")));
  page.on("request", (r) => out.requests.push(r.url()));
  page.on("dialog", async (d) => { out.dialogs.push(d.message()); await d.dismiss(); });
  await page.setViewport({ width: widths[0], height: 900 });
  const url = "file://" + args.page;
  const started = Date.now();
  await page.goto(url, { waitUntil: "load" });
  if (mode === "layout") {
    out.layout = [];
    for (const w of widths) {
      await page.setViewport({ width: w, height: 900 });
      out.layout.push(await page.evaluate((w) => ({
        width: w, scrollWidth: document.documentElement.scrollWidth, innerWidth: window.innerWidth,
        // Tables that only fit by scrolling inside their box.
        scrolledTables: [...document.querySelectorAll(".table-wrap")]
          .filter((b) => b.scrollWidth > b.clientWidth).map((b) => b.querySelector("table")?.className),
      }), w));
    }
  } else {
    await page.waitForSelector("#count[data-count]");
    out.loadMs = Date.now() - started;
    out.total = await page.$eval("#count", (e) => Number(e.dataset.count));
    out.charts = await page.evaluate(() => Object.fromEntries(
      ["stop-chart", "team-chart", "variant-chart"].map((id) => {
        const svg = document.getElementById(id);
        return [id, svg ? [...svg.querySelectorAll("g.bar")].map((g) => g.dataset.label) : null];
      })));
    // Each filter's options, one at a time: label -> rows shown.
    out.filters = await page.evaluate(() => {
      const res = {};
      for (const id of ["f-outcome", "f-stop", "f-team", "f-variant"]) {
        const sel = document.getElementById(id);
        res[id] = {};
        for (const o of [...sel.options].slice(1)) {
          sel.value = o.value;
          sel.dispatchEvent(new Event("change"));
          res[id][o.textContent] = Number(document.getElementById("count").dataset.count);
        }
        sel.value = "";
        sel.dispatchEvent(new Event("change"));
      }
      return res;
    });
    if (args.text !== undefined) {
      out.text = await page.evaluate((text) => {
        const input = document.getElementById("f-text");
        const t0 = performance.now();
        input.value = text;
        input.dispatchEvent(new Event("input"));
        const ms = performance.now() - t0;
        const ids = [...document.querySelectorAll("#tasks tbody tr")].map((tr) => tr.cells[0].textContent);
        const count = Number(document.getElementById("count").dataset.count);
        input.value = "";
        input.dispatchEvent(new Event("input"));
        return { count, ids, ms };
      }, args.text);
    }
    out.sorted = await page.evaluate(() => {
      const th = [...document.querySelectorAll("#tasks th")].find((t) => t.dataset.col === "cost");
      const col = [...th.parentElement.cells].indexOf(th);
      const costs = () => [...document.querySelectorAll("#tasks tbody tr")].map((tr) => tr.cells[col].textContent);
      const t0 = performance.now();
      th.click();
      const ms = performance.now() - t0;
      const first = { order: th.getAttribute("aria-sort"), costs: costs() };
      th.click();
      const second = { order: th.getAttribute("aria-sort"), costs: costs() };
      return { first, second, ms };
    });
    // --open A,B: each task's transcript, opened by clicking its row.
    out.transcripts = {};
    for (const task of args.open ? args.open.split(",") : []) {
      await page.evaluate((task) => {
        const input = document.getElementById("f-text");
        input.value = task;
        input.dispatchEvent(new Event("input"));
        const tr = [...document.querySelectorAll("#tasks tbody tr")].find((r) => r.cells[0].textContent === task);
        tr.click();
      }, task);
      const t0 = Date.now();
      await page.waitForFunction((task) => {
        const p = document.getElementById("transcript");
        return p.dataset.task === task && p.querySelector(".turn, .warn");
      }, { timeout: 10000 }, task);
      const seen = await page.evaluate(() => {
        const p = document.getElementById("transcript");
        const texts = (sel) => [...p.querySelectorAll(sel)].map((e) => e.textContent);
        return {
          turns: texts(".turn > h3"),
          declared: texts(".stage.declared li"),
          callIds: texts(".stage.calls .call-id"),
          decisionIds: texts(".stage.decisions .call-id"),
          resultIds: texts(".stage.results .call-id"),
          decisions: [...p.querySelectorAll(".decision")].map((d) => ({ cls: d.className, text: d.textContent })),
          events: texts(".events li"),
          thinking: texts("details.thinking pre"),
          warnings: texts(".warn"),
          text: p.textContent,
          images: document.querySelectorAll("img").length,
        };
      });
      seen.openMs = Date.now() - t0;
      out.transcripts[task] = seen;
      if (args.screenshot && Object.keys(out.transcripts).length === 1) {
        // The table with the task open, and the transcript's first turns under it.
        await page.setViewport({ width: widths[0], height: 1500 });
        await page.evaluate(() => document.getElementById("filters").scrollIntoView());
        await page.screenshot({ path: args.screenshot, type: "png" });
      }
    }
    out.scrollWidth = await page.evaluate(() => document.documentElement.scrollWidth);
    out.innerWidth = await page.evaluate(() => window.innerWidth);
  }
} catch (e) {
  out.failure = String(e && e.stack ? e.stack : e);
} finally {
  await browser.close();
}
process.stdout.write(JSON.stringify(out) + "\n");
