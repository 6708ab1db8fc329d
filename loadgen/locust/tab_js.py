"""The script that draws the loadgen tab's status, SLO verdict, throughput and charts (served at ``/loadgen/tab.js``).

Locust's built-in extension tab shows a table only; this script (added to Locust's page
by :mod:`loadgen.locust.webui`) puts a panel above that table while the loadgen tab is
open: the test's state (running, draining with the requests still in flight, stopped),
the settings in use, the SLO verdict, the throughput over the measurement window so far,
and four charts over time (output tok/s, requests/s, TTFT and TPOT p50/p99, with the SLO
thresholds dashed) drawn as inline SVG from ``/loadgen`` every two seconds. No library,
no network beyond this UI's own origin.
"""

TAB_JS = r"""
(function () {
  "use strict";
  var PANEL_ID = "loadgen-panel";
  var last = null;
  function esc(s) {
    return String(s).replace(/[&<>"]/g, function (c) { return {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"}[c]; });
  }
  function fmt(v, d) {
    if (v === null || v === undefined || !isFinite(v)) return "–";
    return Number(v).toFixed(d === undefined ? 1 : d);
  }
  function niceMax(v) {
    if (!(v > 0)) return 1;
    var p = Math.pow(10, Math.floor(Math.log10(v))), m = v / p;
    return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * p;
  }
  function chart(title, unit, t, lines, thresholds) {
    var W = 460, H = 190, L = 52, R = 10, T = 26, B = 30;
    var ymax = 0, tmax = t.length ? t[t.length - 1] : 1;
    lines.forEach(function (l) { l.v.forEach(function (v) { if (v !== null && v > ymax) ymax = v; }); });
    (thresholds || []).forEach(function (th) { if (th.v > ymax) ymax = th.v; });
    ymax = niceMax(ymax * 1.05);
    var x = function (s) { return L + (W - L - R) * (tmax > 0 ? s / tmax : 0); };
    var y = function (v) { return T + (H - T - B) * (1 - v / ymax); };
    var g = '<svg class="loadgen-chart" width="' + W + '" height="' + H + '" role="img" aria-label="' + esc(title) + '">';
    g += '<text x="' + L + '" y="16" font-size="13" font-weight="600" fill="currentColor">' + esc(title) + '</text>';
    for (var i = 0; i <= 4; i++) {
      var v = ymax * i / 4, yy = y(v);
      g += '<line x1="' + L + '" x2="' + (W - R) + '" y1="' + yy + '" y2="' + yy + '" stroke="currentColor" stroke-opacity="0.15"/>';
      g += '<text x="' + (L - 6) + '" y="' + (yy + 4) + '" font-size="11" text-anchor="end" fill="currentColor">' +
           (ymax >= 100 ? v.toFixed(0) : v.toFixed(ymax >= 10 ? 1 : 2)) + '</text>';
    }
    var steps = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600];
    var step = steps.filter(function (c) { return tmax / c <= 6; })[0] || 7200;
    for (var s = 0; s <= tmax + 1e-9; s += step) {
      g += '<text x="' + x(s) + '" y="' + (H - 12) + '" font-size="11" text-anchor="middle" fill="currentColor">' + s + '</text>';
    }
    g += '<text x="' + (W - R) + '" y="' + (H - 1) + '" font-size="11" text-anchor="end" fill="currentColor" fill-opacity="0.7">s since start · ' + esc(unit) + '</text>';
    (thresholds || []).forEach(function (th) {
      g += '<line x1="' + L + '" x2="' + (W - R) + '" y1="' + y(th.v) + '" y2="' + y(th.v) + '" stroke="' + th.c + '" stroke-dasharray="6 4"/>';
      g += '<text x="' + (L + 4) + '" y="' + (y(th.v) - 4) + '" font-size="11" fill="' + th.c + '">' + esc(th.label) + '</text>';
    });
    var lx = L + 8;
    lines.forEach(function (l) {
      var d = "", pen = false;
      l.v.forEach(function (v, k) {
        if (v === null) { pen = false; return; }
        d += (pen ? "L" : "M") + x(t[k]).toFixed(1) + " " + y(v).toFixed(1);
        pen = true;
      });
      if (d) g += '<path d="' + d + '" fill="none" stroke="' + l.c + '" stroke-width="2"/>';
      if (l.v.length === 1 && l.v[0] !== null) g += '<circle cx="' + x(t[0]) + '" cy="' + y(l.v[0]) + '" r="3" fill="' + l.c + '"/>';
      g += '<rect x="' + lx + '" y="' + (T + 2) + '" width="10" height="3" fill="' + l.c + '"/>' +
           '<text x="' + (lx + 14) + '" y="' + (T + 7) + '" font-size="11" fill="currentColor">' + esc(l.name) + '</text>';
      lx += 22 + 7 * l.name.length;
    });
    if (!t.length) g += '<text x="' + ((L + W) / 2) + '" y="' + (H / 2) + '" font-size="12" text-anchor="middle" fill="currentColor" fill-opacity="0.6">waiting for the first full second</text>';
    return g + "</svg>";
  }
  function sloLines(d, metric) {
    var out = [];
    ((d.slo && d.slo.targets) || d.slo_targets || []).forEach(function (t) {
      var label = t.target || t;
      var m = /^([a-z_]+):p([0-9.]+)<=([0-9.]+)ms$/.exec(label);
      if (m && m[1] === metric) out.push({v: parseFloat(m[3]), label: "SLO " + label, c: "#d32f2f"});
    });
    return out;
  }
  function render(d) {
    var st = d.state, colors = {running: "#2e7d32", draining: "#ed6c02", stopped: "#616161", idle: "#616161"};
    var h = '<div style="display:flex;gap:12px;align-items:center;flex-wrap:wrap;margin-bottom:6px">';
    h += '<span data-loadgen-state="' + esc(st) + '" style="background:' + (colors[st] || "#616161") +
         ';color:#fff;border-radius:4px;padding:2px 10px;font-weight:700;letter-spacing:.05em">' + esc(st.toUpperCase()) + '</span>';
    if (st === "draining" && d.draining) {
      var n = d.draining.in_flight, wait = ' (' + fmt(d.draining.elapsed_s, 1) + ' s of the ' +
          fmt(d.draining.stop_timeout_s, 0) + ' s stop timeout; then cancelled)';
      h += '<span>sending stopped; ' + (n === 0 ? "every request has finished; writing result.json" :
           n === null ? "the workers' requests in flight are finishing" + wait :
           n + " request(s) in flight finishing" + wait) + '</span>';
    }
    h += '</div>';
    var s = d.settings || {};
    h += '<div style="opacity:.85;margin-bottom:6px">settings: ' + esc(s.rate === null || s.rate === undefined ? "closed loop, " + (s.users === null ? "N" : s.users) + " users" : "open loop, " + s.arrival + " at " + s.rate + " req/s") +
         ' · input tokens ' + esc(s.input_tokens) + ' · output tokens ' + esc(s.output_tokens === null ? "not set" : s.output_tokens) + '</div>';
    if (d.slo) {
      var ok = d.slo.met;
      h += '<div style="margin-bottom:6px"><b data-loadgen-slo="' + (ok ? "met" : "missed") + '" style="color:' + (ok ? "#2e7d32" : "#d32f2f") + '">SLO ' + (ok ? "MET" : "MISSED") + '</b> so far: ';
      h += d.slo.targets.map(function (t) {
        return esc(t.target) + " → " + fmt(t.value_ms, 1) + " ms " + (t.met ? "✓" : "✗") + " (" + t.exceedances + "/" + t.denominator + " over)";
      }).join(" · ");
      h += " · attainment " + fmt(100 * (d.slo.attainment || 0), 1) + " % · goodput " + fmt(d.slo.goodput_rps, 2) + " req/s</div>";
    } else if (d.slo_targets && d.slo_targets.length) {
      h += '<div style="margin-bottom:6px"><b>SLO</b> ' + esc(d.slo_targets.join(", ")) + ': no request yet</div>';
    } else {
      h += '<div style="margin-bottom:6px;opacity:.85"><b>SLO</b> none (set one under Custom parameters in the start form, e.g. ttft:p99&lt;=300ms)</div>';
    }
    var tp = d.throughput || {};
    h += '<div style="margin-bottom:8px">throughput (measurement window so far): <b>' + fmt(tp.output_tps, 1) + ' output tok/s</b> · ' +
         fmt(tp.completion_rps, 2) + ' completed req/s' + (tp.offered_rps !== null && tp.offered_rps !== undefined ? ' · offered ' + fmt(tp.offered_rps, 2) + ' req/s' : '') +
         ' · sent ' + fmt(tp.achieved_send_rps, 2) + ' req/s' + (d.counts ? ' · ' + d.counts.requests + ' requests, ' + d.counts.failed + ' failed' : '') + '</div>';
    var se = d.series || {t_s: []};
    h += '<div style="display:flex;flex-wrap:wrap;gap:8px 18px">';
    h += chart("Output tokens per second", "tok/s", se.t_s || [], [{name: "output tok/s", v: se.output_tps || [], c: "#1976d2"}]);
    h += chart("Requests per second (by completion)", "req/s", se.t_s || [], [
      {name: "completed", v: se.completed_rps || [], c: "#2e7d32"}, {name: "failed", v: se.failed_rps || [], c: "#d32f2f"}]);
    h += chart("TTFT (ms)", "ms", se.t_s || [], [
      {name: "p50", v: se.ttft_p50_ms || [], c: "#1976d2"}, {name: "p99", v: se.ttft_p99_ms || [], c: "#9c27b0"}], sloLines(d, "ttft"));
    h += chart("TPOT (ms)", "ms", se.t_s || [], [
      {name: "p50", v: se.tpot_p50_ms || [], c: "#1976d2"}, {name: "p99", v: se.tpot_p99_ms || [], c: "#9c27b0"}], sloLines(d, "tpot"));
    h += "</div>";
    if (d.result_path) h += '<div style="margin-top:6px">result: ' + esc(d.result_path) + '</div>';
    return h;
  }
  function onTab() { return new URLSearchParams(location.search).get("tab") === "loadgen"; }
  function place() {
    var panel = document.getElementById(PANEL_ID);
    if (!onTab()) { if (panel) panel.remove(); return null; }
    var table = document.querySelector("table");
    var box = table && table.closest(".MuiTableContainer-root, .MuiPaper-root");
    if (!box || !box.parentNode) return null;
    if (!panel) {
      panel = document.createElement("div");
      panel.id = PANEL_ID;
      panel.style.cssText = "margin:0 0 16px 0;font-size:14px;line-height:1.5";
    }
    if (panel.nextSibling !== box) box.parentNode.insertBefore(panel, box);
    return panel;
  }
  function tick() {
    var panel = place();
    if (panel && last) panel.innerHTML = render(last);
  }
  function poll() {
    if (!onTab()) { tick(); return; }
    fetch("./loadgen", {credentials: "same-origin"}).then(function (r) { return r.json(); })
      .then(function (d) { last = d; tick(); }).catch(function () {});
  }
  setInterval(poll, 1000);
  setInterval(tick, 500);
  poll();
})();
"""
