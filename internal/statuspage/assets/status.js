// l4lb status page: reads status.json every few seconds and redraws the
// tables in place. Every name and note is written with textContent (never
// as markup): reasons, check errors and DNS names are operators' and
// servers' text. Read-only: the page sends nothing but GETs.
"use strict";

(function () {
  const params = new URLSearchParams(window.location.search);
  // ?refresh=N: seconds between reads (1 to 60, default 2).
  const every = Math.min(60, Math.max(1, Number(params.get("refresh")) || 2));
  let prev = null; // the last sample: {t (ms), vips: Map key -> counters}

  // el makes an element with a class and a text (textContent only).
  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }

  function row(cells, cls) {
    const tr = el("tr", cls);
    for (const c of cells) tr.append(c instanceof Node ? c : el("td", "", c));
    return tr;
  }

  function td(text, cls) { return el("td", cls || "", text); }

  function bytes(n) {
    const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let i = 0;
    n = Number(n) || 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return (i === 0 ? n.toFixed(0) : n.toFixed(1)) + " " + units[i];
  }

  function rate(n) {
    if (n === null) return "–";
    return n >= 100 ? n.toFixed(0) : n.toFixed(1);
  }

  function duration(s) {
    s = Math.max(0, Math.floor(s));
    if (s < 60) return s + "s";
    if (s < 3600) return Math.floor(s / 60) + "m" + String(s % 60).padStart(2, "0") + "s";
    if (s < 86400) return Math.floor(s / 3600) + "h" + String(Math.floor(s / 60) % 60).padStart(2, "0") + "m";
    return Math.floor(s / 86400) + "d" + String(Math.floor(s / 3600) % 24).padStart(2, "0") + "h";
  }

  // ago is how long ago an RFC 3339 time was ("" when absent).
  function ago(ts) {
    if (!ts) return "";
    const t = Date.parse(ts);
    if (Number.isNaN(t) || t <= 0) return "";
    return duration((Date.now() - t) / 1000) + " ago";
  }

  function rtt(ns) {
    if (!ns) return "–";
    const ms = ns / 1e6;
    return ms >= 10 ? ms.toFixed(0) + " ms" : ms.toFixed(2) + " ms";
  }

  // perSec is the rate of a counter since the last sample (null: none).
  function perSec(key, field, value, t) {
    if (!prev) return null;
    const old = prev.vips.get(key);
    if (!old || old[field] === undefined || value < old[field]) return null;
    const dt = (t - prev.t) / 1000;
    return dt > 0 ? (value - old[field]) / dt : null;
  }

  // state is a backend's one word, which colours its row.
  function state(b) {
    if (b.removed) return "removed";
    if (b.override === "disable") return "disabled";
    if (b.health === "down") return "down";
    const agent = b.agent ? b.agent.state.split(" ") : [];
    if (agent[0] === "down") return "down";
    if (b.override === "drain" || agent[1] === "drain" || agent[1] === "maint") return "draining";
    if (b.degraded && !b.degraded_kept) return "degraded";
    if (b.backup) return "backup";
    return b.health === "up" ? "up" : "unknown";
  }

  function mode(v) { return v.xdp ? "xdp" : "proxy"; }

  function vipKey(v) { return v.name + "\u0000" + v.protocol + "\u0000" + v.listen + "\u0000" + (v.draining ? "d" : ""); }

  function renderProcess(st) {
    const p = st.process || {};
    const dl = document.getElementById("process");
    const items = [["version", p.version], ["pid", p.pid], ["up", duration(p.uptime_seconds || 0)], ["config", st.config]];
    const kids = [];
    for (const [k, v] of items) {
      if (v === undefined || v === "") continue;
      kids.push(el("dt", "", k), el("dd", "", v));
    }
    if (st.stopping) kids.push(el("dt", "", "state"), el("dd", "reload-failed", "stopping"));
    dl.replaceChildren(...kids);
  }

  function renderPlane(st) {
    const out = [];
    const r = st.process && st.process.last_reload;
    if (r) {
      const p = el("p");
      p.append(el("span", "muted", "last reload: "),
        el("span", r.ok ? "peer-up" : "reload-failed", r.ok ? "applied" : "refused"),
        el("span", "muted", " " + ago(r.time)));
      if (!r.ok && r.error) p.append(el("span", "note", " " + r.error));
      out.push(p);
    }
    if (st.bgp) {
      const p = el("p");
      p.append(el("span", "muted", "BGP AS" + st.bgp.asn + ", " + (st.bgp.announced || []).length + " routes announced; peers: "));
      for (const peer of st.bgp.peers || []) {
        p.append(el("span", peer.up ? "peer-up" : "peer-down", peer.address + " " + peer.state), " ");
      }
      out.push(p);
    }
    if (st.xdp) {
      const x = st.xdp;
      let drops = 0;
      for (const [k, n] of Object.entries(x.counters || {})) if (k.startsWith("drop_")) drops += n;
      out.push(el("p", "muted", "XDP on " + x.interface + " (" + x.attach + "), " + x.live_flows + " live flows, " + drops + " packets dropped"));
    }
    document.getElementById("plane").replaceChildren(...out);
  }

  const backendHead = ["backend", "address", "state", "override", "weight", "RTT", "live", "max", "flows", "flows/s",
    "bytes in", "bytes out", "in/s", "out/s", "conn. errors", "last change", "last check"];

  function backendRows(v, bs, key, t, tbody) {
    for (const b of bs) {
      const s = state(b);
      const bk = key + "\u0000" + b.id + "\u0000" + b.address;
      const tr = el("tr", "b-" + s);
      tr.dataset.vip = v.name;
      tr.dataset.backend = b.id;
      tr.dataset.state = s;
      let override = "";
      if (b.override) override = b.override + (b.override_by ? " by " + b.override_by : "") + (b.override_since ? ", " + ago(b.override_since) : "");
      const stateCell = el("td", "text");
      stateCell.append(el("span", "st st-" + s, s));
      let check = b.last_check || "";
      if (b.reason && b.reason !== check) check = b.reason + (check ? "; last check: " + check : "");
      if (b.trial) check = "trial" + (check ? "; " + check : "");
      if (b.degraded) check = "degraded: " + b.degraded + (check ? "; " + check : "");
      const lag = b.replica_lag_seconds !== undefined ? "lag " + b.replica_lag_seconds.toFixed(1) + "s" : (b.replica_lag_unknown ? "lag unknown (" + b.replica_lag_unknown + ")" : "");
      if (lag) check += (check ? "; " : "") + lag;
      if (b.agent) check += (check ? "; " : "") + "agent " + b.agent.state + (b.agent.why ? " (" + b.agent.why + ")" : "") +
        (b.agent.error ? ", last agent check: " + b.agent.error : "");
      tr.append(td(b.id, "text name"), td(b.address, "text"), stateCell, td(override, "note override"),
        td(b.effective_weight === b.weight ? b.weight : b.effective_weight + "/" + b.weight),
        td(rtt(b.rtt_ns)), td(b.live_flows), td(b.max_flows || "–"), td(b.flows),
        td(rate(perSec(bk, "flows", b.flows, t))),
        td(bytes(b.bytes_in)), td(bytes(b.bytes_out)),
        td(rateBytes(perSec(bk, "in", b.bytes_in, t))), td(rateBytes(perSec(bk, "out", b.bytes_out, t))),
        td(b.connect_fails), td(ago(b.since), "text"), td(check, "note"));
      tbody.append(tr);
      sample.set(bk, { flows: b.flows, in: b.bytes_in, out: b.bytes_out });
    }
  }

  function rateBytes(n) { return n === null ? "–" : bytes(n) + "/s"; }

  let sample = new Map();

  function renderVIP(v, t) {
    const key = vipKey(v);
    const serving = v.serving || "primaries";
    let cls = "vip";
    if (v.draining) cls += " vip-draining";
    else if (v.eligible === 0 || serving === "none") cls += " vip-none";
    else if (serving === "backups") cls += " vip-backups";
    const sec = el("section", cls);
    sec.dataset.vip = v.name;
    const h2 = el("h2", "", v.name);
    const sub = [v.listen, v.protocol, mode(v), v.algorithm].filter(Boolean).join(" · ");
    h2.append(el("span", "sub", sub + (v.draining ? " · draining" : "")));
    if (v.mode_change) h2.append(el("span", "sub", "mode change " + v.mode_change.from + " → " + v.mode_change.to));
    sec.append(h2);

    const summary = el("table", "summary");
    const head = ["serving", "eligible", "active", "accepted", "accepted/s", "no backend", "conn. errors", "denied", "limited"];
    summary.append(row(head.map((h) => el("th", "", h))));
    const accRate = perSec(key, "accepted", v.accepted, t);
    const sum = row([td(serving, "text"), td(v.eligible + " of " + (v.backends || []).filter((b) => !b.removed).length),
      td(v.active), td(v.accepted), td(rate(accRate)), td(v.no_backend), td(v.connect_fails), td(v.denied || 0), td(v.client_limited || 0)], "vipsum");
    sum.dataset.serving = serving;
    summary.append(sum);
    sec.append(summary);
    sample.set(key, { accepted: v.accepted });

    sec.append(backendTable(v, v.backends || [], key, t));
    if (v.sni) {
      for (const r of v.sni.routes || []) {
        sec.append(el("h3", "", "route " + r.name + ": " + [].concat(r.names || [], r.databases || [], r.users || []).join(", ") + " (" + r.routed + " connections, " + r.eligible + " eligible)"));
        sec.append(backendTable(v, r.backends || [], key + "\u0000route\u0000" + r.name, t));
      }
    }
    if (v.names && v.names.length) {
      const names = el("table", "names");
      names.append(row(["named backend", "looks up", "addresses", "answer age", "errors", "failing"].map((h) => el("th", "", h))));
      for (const n of v.names) {
        names.append(row([td(n.backend, "text"), td(n.lookup, "text"), td((n.addresses || []).join(" "), "note"),
          td(n.answer_age_seconds ? duration(n.answer_age_seconds) : "never"), td(n.errors || 0), td(n.error ? n.error + " (failing for " + duration(n.failing_for_seconds || 0) + ")" : "", "note")]));
      }
      sec.append(names);
    }
    return sec;
  }

  function backendTable(v, bs, key, t) {
    const table = el("table", "backends");
    const thead = el("thead");
    thead.append(row(backendHead.map((h, i) => el("th", i < 4 ? "text" : "", h))));
    const tbody = el("tbody");
    backendRows(v, bs, key, t, tbody);
    table.append(thead, tbody);
    return table;
  }

  function render(st, t) {
    sample = new Map();
    renderProcess(st);
    renderPlane(st);
    const secs = (st.vips || []).map((v) => renderVIP(v, t));
    if (secs.length === 0) secs.push(el("p", "muted", "no VIP runs"));
    document.getElementById("vips").replaceChildren(...secs);
    prev = { t: t, vips: sample };
    const up = document.getElementById("updated");
    up.textContent = "updated " + new Date().toLocaleTimeString() + ", every " + every + "s";
    up.dataset.refreshes = String(Number(up.dataset.refreshes || 0) + 1);
  }

  function showError(msg) {
    const e = document.getElementById("error");
    e.textContent = msg;
    e.hidden = !msg;
  }

  async function refresh() {
    try {
      let st;
      try {
        const r = await fetch("status.json", { cache: "no-store", credentials: "omit" });
        if (!r.ok) throw new Error("status.json: HTTP " + r.status);
        st = await r.json();
      } catch (err) {
        showError("cannot read the status (" + err.message + "); the tables show the last good read");
        return;
      }
      try {
        render(st, performance.now());
        showError("");
      } catch (err) {
        showError("cannot draw the status (" + err.message + "): a bug of this page, please report it");
      }
    } finally {
      window.setTimeout(refresh, every * 1000);
    }
  }

  refresh();
})();
