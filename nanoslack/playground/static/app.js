// The playground page: a small chat client over the server's event stream.
// State arrives as one snapshot, then one event per change; the page never polls.
"use strict";

const S = {
  me: null, room: null, users: new Map(), convs: new Map(), msgs: new Map(),
  notes: [], status: null, current: null, thread: null, unread: new Map(),
  // An app's status line under a thread ("dana is thinking…"), by channel and thread ts.
  lines: new Map(),
  memories: [], memoriesAsked: 0,
  // A routine fired from the page: whose post to show when it comes (bot user id, and its
  // room, or "" for the owner's DM); the post it made, highlighted.
  routineWatch: null, highlight: null,
  // Each bot's Home view as published for the human (null: none yet), and the one shown.
  homes: new Map(), home: null,
  // Agent sessions processing (Slack shows their Stop button), by channel and thread ts.
  sessions: new Set(),
  // The human's last 👍 / 👎 on a reply, by channel and message ts: shown pressed, as Slack does.
  feedback: new Map(),
  // The suggested prompts each bot set on its DM with the human, by channel.
  prompts: new Map(),
};
const COLORS = ["#e8912d", "#2bac76", "#1264a3", "#7c3085", "#cd2553", "#4a9a9a"];
const NOTE_TAGS = {
  admitted: "guard", dropped: "guard", hop_limit: "hop limit", hops_reset: "hops",
  approval_requested: "approval", turn_silent: "turn", turn_failed: "turn", turn_budget: "turn",
  refuse: "gate", decline: "gate", failed: "error", memory: "memory", memory_refused: "memory",
};
// Slack's shortcodes for the emoji the fleet and the sample crew write (others stay as text).
const EMOJI = {
  wave: "👋", white_check_mark: "✅", heavy_check_mark: "✔️", stop_sign: "🛑", eyes: "👀",
  ballot_box_with_ballot: "🗳️", hourglass_flowing_sand: "⏳", hourglass: "⌛", pushpin: "📌",
  clipboard: "📋", alarm_clock: "⏰", tada: "🎉", "+1": "👍", thumbsup: "👍", "-1": "👎",
  x: "❌", warning: "⚠️", rocket: "🚀", memo: "📝", bell: "🔔", no_entry: "⛔", lock: "🔒",
  speech_balloon: "💬", robot_face: "🤖", raised_hand: "✋", pause_button: "⏸️", arrow_forward: "▶️",
};
const $ = (id) => document.getElementById(id);

// ---- events ------------------------------------------------------------------------------
function connect() {
  const es = new EventSource("/events");
  es.onmessage = (e) => handle(JSON.parse(e.data));
  es.onerror = () => { $("status").textContent = "reconnecting…"; };
}

function handle(ev) {
  if (ev.type === "snapshot") return loadSnapshot(ev);
  if (ev.type === "message") return onMessage(ev.conversation, ev.message);
  if (ev.type === "note") {
    S.notes.push(ev.note);
    if (ev.note.kind === "memory") loadMemories();
    return renderPanes(ev.note.channel);
  }
  if (ev.type === "status") { S.status = ev.status; return renderStatus(); }
  if (ev.type === "status_line") return onStatusLine(ev);
  if (ev.type === "sessions") return onSessions(ev.sessions);
  if (ev.type === "prompts") { S.prompts = new Map(Object.entries(ev.prompts)); return renderPrompts(); }
  if (ev.type === "home") { S.homes.set(ev.bot, ev.view); if (S.home === ev.bot) renderMain(); }
}

function lineKey(channel, ts) { return channel + " " + ts; }

// A DM's status line opens its thread, where Slack shows it and the streamed answer grows.
function onStatusLine(ev) {
  const key = lineKey(ev.channel, ev.thread_ts);
  if (ev.status) S.lines.set(key, { app: ev.app, status: ev.status }); else S.lines.delete(key);
  const conv = S.convs.get(ev.channel);
  if (ev.status && conv && conv.kind === "im" && ev.channel === S.current
      && !(S.thread && S.thread.ts === ev.thread_ts)) openThread(ev.channel, ev.thread_ts);
  renderPanes(ev.channel);
}

function onSessions(list) {
  const before = S.sessions;
  S.sessions = new Set(list.map((x) => lineKey(x.channel, x.thread_ts)));
  const channels = new Set([...before, ...S.sessions].map((k) => k.split(" ")[0]));
  for (const ch of channels) renderPanes(ch);
}

// The session's Stop button: Slack's click, which the app must act on (agent_session_stopped).
async function stopSession(channel, ts, btn) {
  btn.disabled = true;
  const r = await fetch("/api/stop", {
    method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ channel, thread_ts: ts }),
  });
  if (!r.ok) btn.disabled = false;
}

function loadSnapshot(ev) {
  S.me = ev.me; S.room = ev.room; S.notes = ev.notes; S.status = ev.status;
  S.users = new Map(ev.users.map((u) => [u.id, u]));
  S.convs = new Map(ev.conversations.map((c) => [c.id, c]));
  S.homes = new Map(Object.entries(ev.homes || {}));
  S.sessions = new Set((ev.sessions || []).map((x) => lineKey(x.channel, x.thread_ts)));
  S.prompts = new Map(Object.entries(ev.prompts || {}));
  S.msgs = new Map();
  for (const [ch, list] of Object.entries(ev.messages)) S.msgs.set(ch, new Map(list.map((m) => [m.ts, m])));
  if (!S.current || !S.convs.has(S.current)) S.current = ev.room;
  $("me").textContent = ev.me.name;
  renderAll();
  loadMemories();
}

// What the crew remembers: read again whenever a note says one was kept or forgotten.
async function loadMemories() {
  const asked = ++S.memoriesAsked;
  let answer;
  try {
    const r = await fetch("/api/memories");
    if (!r.ok) return;
    answer = await r.json();
  } catch (_) { return; }
  if (asked !== S.memoriesAsked) return; // a newer answer is on its way
  S.memories = answer.instances;
  renderMemories();
}

function onMessage(conv, msg) {
  const known = S.convs.has(conv.id);
  S.convs.set(conv.id, conv);
  if (!S.msgs.has(conv.id)) S.msgs.set(conv.id, new Map());
  const isNew = !S.msgs.get(conv.id).has(msg.ts);
  S.msgs.get(conv.id).set(msg.ts, msg);
  if (msg.bot_id) S.lines.delete(lineKey(conv.id, msg.thread_ts || msg.ts));  // an app's post clears it
  if (routineResult(conv, msg, isNew)) { openConversation(conv.id); return; }
  if (isNew && conv.id !== S.current && msg.user !== S.me.id) {
    S.unread.set(conv.id, (S.unread.get(conv.id) || 0) + 1);
  }
  if (!known || conv.id !== S.current || isNew) renderSidebar();
  renderPanes(conv.id);
}

// ---- rendering ---------------------------------------------------------------------------
function renderAll() { renderSidebar(); renderStatus(); renderMain(); renderThread(); }

function renderPanes(channel) {
  if (channel === S.current) { renderMain(); renderThread(); }
}

function renderSidebar() {
  for (const section of ["rooms", "dms"]) {
    const ul = $(section);
    ul.replaceChildren();
    for (const c of S.convs.values()) {
      if (c.section !== section) continue;
      const li = el("li", "conv");
      li.dataset.id = c.id; li.dataset.kind = c.kind;
      li.append(el("span", "", (c.kind === "im" ? "" : "# ") + c.label));
      const n = S.unread.get(c.id) || 0;
      if (n) { li.classList.add("unread"); li.append(el("span", "badge", String(n))); }
      if (c.id === S.current && !S.home) li.classList.add("current");
      li.onclick = () => openConversation(c.id);
      ul.append(li);
    }
  }
  const homes = $("homes");
  homes.replaceChildren();
  for (const bot of S.homes.keys()) {
    const li = el("li", "conv" + (S.home === bot ? " current" : ""));
    li.dataset.bot = bot;
    li.append(el("span", "", bot + " · Home"));
    li.onclick = () => openHome(bot);
    homes.append(li);
  }
}

// A bot's Home tab: opening it is Slack's app_home_opened; the bot publishes the view.
async function openHome(bot) {
  S.home = bot; S.thread = null;
  renderSidebar(); renderMain(); renderThread();
  try {
    const r = await fetch("/api/home/open", {
      method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ bot }),
    });
    if (r.ok) { const answer = await r.json(); if (answer.view) S.homes.set(bot, answer.view); }
  } catch (_) { /* the stream brings the view when it is published */ }
  if (S.home === bot) renderMain();
}

function renderHome() {
  const bot = S.home, view = S.homes.get(bot);
  $("conv-title").textContent = bot + " · Home";
  $("conv-members").textContent = "what " + bot + " publishes for you (views.publish)";
  $("composer").hidden = true;
  const box = $("timeline");
  box.replaceChildren();
  const page = el("div", "home-view");
  page.id = "home-view";
  if (!view) page.append(el("div", "empty", "Opening the Home…"));
  else for (const b of view.blocks || []) page.append(homeBlockEl(bot, b));
  box.append(page);
}

// Block Kit as a Home shows it: header, section (text, fields, a button beside it), divider,
// context, actions.
function homeBlockEl(bot, b) {
  if (b.type === "header") return el("h2", "home-header", (b.text && b.text.text) || "");
  if (b.type === "divider") return el("hr", "home-divider");
  if (b.type === "context") return textEl((b.elements || []).map((e) => e.text || "").join(" "), "context");
  if (b.type === "actions") {
    const bar = el("div", "actions");
    for (const e of b.elements || []) if (e.type === "button") bar.append(homeButton(bot, e, bar));
    return bar;
  }
  const row = el("div", "home-section");
  if (b.text) row.append(textEl(b.text.text || ""));
  if (b.fields) {
    const fields = el("div", "home-fields");
    for (const f of b.fields) fields.append(textEl(f.text || ""));
    row.append(fields);
  }
  if (b.accessory && b.accessory.type === "button") row.append(homeButton(bot, b.accessory, row));
  return row;
}

function homeButton(bot, e, bar) {
  const btn = el("button", "btn" + (e.style ? " " + e.style : ""), (e.text && e.text.text) || e.action_id);
  btn.type = "button"; btn.dataset.actionId = e.action_id;
  if (e.value !== undefined) btn.dataset.value = e.value;
  btn.onclick = async () => {
    for (const b of bar.querySelectorAll("button")) b.disabled = true;
    const r = await fetch("/api/home/click", {
      method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ bot, action_id: e.action_id, value: e.value }),
    });
    if (!r.ok) for (const b of bar.querySelectorAll("button")) b.disabled = false;
  };
  return btn;
}

function renderStatus() {
  const st = S.status, box = $("status");
  if (!st) return;
  box.replaceChildren();
  const inst = el("span", "chip");
  for (const i of st.instances) {
    const dot = el("span", "dot" + (i.connected ? " on" : ""));
    const c = el("span", "chip instance", i.name);
    c.dataset.connected = String(i.connected);
    c.prepend(dot);
    inst.append(c);
  }
  const up = st.instances.filter((i) => i.connected).length;
  box.append(el("span", "chip", `${up}/${st.instances.length} connected`), inst);
  for (const r of st.rooms) {
    const c = el("span", "chip hops" + (r.hops >= r.max ? " warn" : ""), `#${r.label} hops ${r.hops}/${r.max}`);
    c.dataset.room = r.channel;
    box.append(c);
  }
  const pend = el("span", "chip pending" + (st.pending.length ? " warn" : ""),
    st.pending.length ? `${st.pending.length} pending approval: ` + st.pending.map((p) => `${p.sender} → ${p.instance}`).join(", ")
      : "no pending approvals");
  box.append(pend);
  for (const r of st.routines || []) {
    const b = el("button", "chip routine", `▶ ${r.instance}'s ${r.name}` + (r.last ? ` (last: ${r.last})` : ""));
    b.type = "button"; b.title = `${r.schedule}: run it now`;
    b.onclick = () => fireRoutine(r.instance, r.name, b);
    box.append(b);
  }
}

async function fireRoutine(instance, name, btn) {
  btn.disabled = true;
  try {
    const r = await fetch("/api/routine", {
      method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ instance, name }),
    });
    const answer = await r.json();
    // Its post opens where it lands (a room, or alice's DM with the bot) and stands out there.
    if (answer.ok) S.routineWatch = { bot: answer.bot, channel: answer.channel };
  } finally {
    btn.disabled = false;
  }
}

// The fired routine's post: its conversation opens and the post is highlighted.
function routineResult(conv, msg, isNew) {
  const w = S.routineWatch;
  if (!w || !isNew || msg.user !== w.bot || msg.thread_ts) return false;
  if (w.channel ? conv.id !== w.channel : conv.kind !== "im") return false;
  S.routineWatch = null; S.highlight = msg.ts;
  return true;
}

function renderMemories() {
  const box = $("memories");
  box.replaceChildren();
  const kept = S.memories.filter((i) => i.notes.length);
  if (!kept.length) { box.append(el("div", "memory-empty", "No notes yet. Try “@dana remember that …”")); return; }
  for (const inst of kept) {
    const d = el("div", "memory-instance");
    d.dataset.instance = inst.name;
    d.append(el("div", "memory-who", `${inst.name}'s notes`));
    const ul = el("ul", "memory-notes");
    for (const n of inst.notes) {
      const li = el("li", "memory-note");
      li.dataset.id = n.id; li.dataset.scope = n.scope;
      li.title = `asked by ${n.asked_by}`;
      li.append(el("span", "memory-id", n.id), el("span", "memory-text", n.text));
      if (n.scope !== "self") li.append(el("span", "memory-scope", n.scope === "room" ? "#" + n.room : "private"));
      ul.append(li);
    }
    d.append(ul);
    box.append(d);
  }
}

function openConversation(id) {
  S.current = id; S.unread.delete(id); S.home = null;
  if (S.thread && S.thread.channel !== id) S.thread = null;
  renderSidebar(); renderMain(); renderThread();
  if (isBotDm(S.convs.get(id))) openMessagesTab(id);
}

function isBotDm(conv) {
  return !!conv && conv.kind === "im" && [...S.users.values()].some((u) => u.bot && conv.members.includes(u.name));
}

// Opening a bot's DM is opening its Messages tab: Slack sends the bot app_home_opened
// (tab: messages) and the bot sets the DM's suggested prompts, which come in the stream.
async function openMessagesTab(channel) {
  try {
    await fetch("/api/dm/open", {
      method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ channel }),
    });
  } catch (_) { /* the DM works without its prompts */ }
}

// The bot's suggested prompts as chips above its DM's composer, as Slack shows them; a click
// posts the prompt's message as the human's own.
function renderPrompts() {
  const box = $("prompts");
  box.replaceChildren();
  const set = !S.home && isBotDm(S.convs.get(S.current)) ? S.prompts.get(S.current) : null;
  box.hidden = !set || !(set.prompts || []).length;
  if (box.hidden) return;
  if (set.title) box.append(el("span", "prompts-title", set.title));
  const channel = S.current;
  for (const p of set.prompts) {
    const chip = el("button", "prompt-chip", p.title);
    chip.type = "button"; chip.dataset.message = p.message; chip.title = p.message;
    chip.onclick = () => sendPrompt(channel, p.message, box);
    box.append(chip);
  }
}

async function sendPrompt(channel, text, box) {
  for (const b of box.querySelectorAll("button")) b.disabled = true;
  try {
    const r = await fetch("/api/post", {
      method: "POST", headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ channel, text, thread_ts: null }),
    });
    const answer = await r.json();
    // As a typed message: the bot answers in its thread, shown straight away.
    if (answer.ok) openThread(channel, answer.ts);
  } finally {
    for (const b of box.querySelectorAll("button")) b.disabled = false;
  }
}

function openThread(channel, ts) {
  S.thread = { channel, ts }; renderThread();
  $("thread-composer").querySelector("textarea").focus();
}

function replyCount(channel, ts) {
  let n = 0;
  for (const r of (S.msgs.get(channel) || new Map()).values()) if (r.thread_ts === ts && r.ts !== ts) n++;
  return n;
}

function isTop(m) { return !m.thread_ts || m.thread_ts === m.ts; }
function sorted(list) { return [...list].sort((a, b) => parseFloat(a.ts) - parseFloat(b.ts)); }

function renderMain() {
  renderPrompts();
  if (S.home) return renderHome();
  $("composer").hidden = false;
  const conv = S.convs.get(S.current);
  if (!conv) return;
  $("conv-title").textContent = (conv.kind === "im" ? "" : "# ") + conv.label;
  $("conv-members").textContent = conv.members.length ? "with " + conv.members.join(", ") : "";
  $("composer").querySelector("textarea").placeholder =
    conv.id === S.room ? "Message the room, e.g. @dana what's the plan for Friday?"
      : conv.kind === "group" ? "Ask the whole crew, e.g. what does each of you take on this week?"
        : `Message ${conv.label}`;
  const all = [...(S.msgs.get(conv.id) || new Map()).values()];
  const tops = sorted(all.filter(isTop));
  const box = $("timeline");
  const stick = nearBottom(box);
  box.replaceChildren();
  if (!tops.length) box.append(el("div", "empty", "No messages yet."));
  const loose = S.notes.filter((n) => n.channel === conv.id && !n.ts);
  for (const m of tops) {
    placeLoose(box, loose, parseFloat(m.ts));
    box.append(messageEl(conv.id, m, true));
    box.append(...notesEl(conv.id, m.ts));
    box.append(...statusLineEl(conv.id, m.ts));
  }
  placeLoose(box, loose, Infinity);
  if (stick) box.scrollTop = box.scrollHeight;
}

function renderThread() {
  const pane = $("thread");
  if (!S.thread) { pane.hidden = true; $("thread-timeline").replaceChildren(); return; }
  pane.hidden = false;
  const { channel, ts } = S.thread;
  const all = [...(S.msgs.get(channel) || new Map()).values()];
  const root = all.find((m) => m.ts === ts);
  const conv = S.convs.get(channel);
  $("thread-where").textContent = conv ? (conv.kind === "im" ? "" : "# ") + conv.label : "";
  const box = $("thread-timeline");
  const stick = nearBottom(box);
  box.replaceChildren();
  if (root) { box.append(messageEl(channel, root, false)); box.append(...notesEl(channel, root.ts)); }
  const replies = sorted(all.filter((m) => m.thread_ts === ts && m.ts !== ts));
  box.append(el("div", "thread-sep", replies.length ? `${replies.length} ${replies.length === 1 ? "reply" : "replies"}` : "No replies yet"));
  for (const m of replies) { box.append(messageEl(channel, m, false)); box.append(...notesEl(channel, m.ts)); }
  box.append(...statusLineEl(channel, ts));
  if (stick) box.scrollTop = box.scrollHeight;
}

function statusLineEl(channel, ts) {
  const line = S.lines.get(lineKey(channel, ts));
  const processing = S.sessions.has(lineKey(channel, ts));
  if (!line && !processing) return [];
  const d = el("div", "status-line");
  if (line) d.append(el("span", "who", line.app), el("span", "text", " " + line.status));
  if (processing) {
    const stop = el("button", "stop-button", "■ Stop");
    stop.title = "Stop this answer";
    stop.onclick = () => stopSession(channel, ts, stop);
    d.append(stop);
  }
  return [d];
}

function placeLoose(box, loose, before) {
  while (loose.length && loose[0].at < before) {
    const n = loose.shift();
    box.append(noteEl(n.kind, [n.instance].filter(Boolean), n.text));
  }
}

function nearBottom(box) { return box.scrollHeight - box.scrollTop - box.clientHeight < 60; }

// Notes about one message, the same note from several instances merged into one line.
function notesEl(channel, ts) {
  const groups = new Map();
  for (const n of S.notes) {
    if (n.channel !== channel || n.ts !== ts) continue;
    const key = n.kind + "\u0000" + n.text;
    if (!groups.has(key)) groups.set(key, { kind: n.kind, text: n.text, who: [] });
    if (n.instance && !groups.get(key).who.includes(n.instance)) groups.get(key).who.push(n.instance);
  }
  return [...groups.values()].map((g) => noteEl(g.kind, g.who.sort(), g.text));
}

function noteEl(kind, who, text) {
  const d = el("div", "note");
  d.dataset.kind = kind;
  d.append(el("span", "tag", NOTE_TAGS[kind] || kind.replace(/_/g, " ")));
  if (who.length) d.append(el("span", "who", who.join(", ")));
  d.append(el("span", "text", text));
  return d;
}

function messageEl(channel, m, inMain) {
  const user = S.users.get(m.user) || { name: m.username || m.user || "?", bot: !!m.bot_id };
  const row = el("div", "msg" + (m.ts === S.highlight ? " routine-result" : ""));
  row.dataset.ts = m.ts; row.dataset.author = user.name;
  const av = el("div", "avatar", user.name.slice(0, 1).toUpperCase());
  av.style.background = colorOf(user.name);
  const body = el("div", "body");
  const meta = el("div", "meta");
  meta.append(el("span", "author", user.name));
  if (user.bot) meta.append(el("span", "app-badge", "APP"));
  meta.append(el("span", "time", timeOf(m.ts)));
  body.append(meta);
  if (m.blocks && m.blocks.length) body.append(...blocksEl(channel, m));
  else if (m.text || !(m.files && m.files.length)) body.append(textEl(m.text || ""));
  if (m.files && m.files.length) body.append(filesEl(m.files));
  if (m.streaming) row.classList.add("streaming");
  if (inMain) {
    const tr = el("div", "thread-row");
    const n = replyCount(channel, m.ts);
    if (n) {
      const link = el("button", "replies-link", `${n} ${n === 1 ? "reply" : "replies"}`);
      link.type = "button"; link.onclick = () => openThread(channel, m.ts);
      tr.append(link);
    }
    const reply = el("button", "reply-link", "Reply in thread");
    reply.type = "button"; reply.onclick = () => openThread(channel, m.ts);
    tr.append(reply);
    body.append(tr);
  }
  row.append(av, body);
  return row;
}

function blocksEl(channel, m) {
  const out = [];
  let worded = false;  // a block that shows the message's words
  for (const b of m.blocks) {
    if (b.type === "markdown") { out.push(markdownEl(b.text || "")); worded = true; }
    else if (b.type === "section" && b.text) { out.push(textEl(b.text.text || "")); worded = true; }
    else if (b.type === "context") out.push(textEl((b.elements || []).map((e) => e.text || "").join(" "), "context"));
    else if (b.type === "context_actions") out.push(...(b.elements || []).filter((e) => e.type === "feedback_buttons").map((e) => feedbackEl(channel, m.ts, e)));
    else if (b.type === "actions") {
      const bar = el("div", "actions");
      for (const e of b.elements || []) {
        if (e.type !== "button") continue;
        const btn = el("button", "btn" + (e.style ? " " + e.style : ""), (e.text && e.text.text) || e.action_id);
        btn.type = "button"; btn.dataset.actionId = e.action_id;
        btn.onclick = () => click(channel, m.ts, e, bar);
        bar.append(btn);
      }
      out.push(bar);
    }
  }
  // A streamed reply's blocks (chat.stopStream: its feedback buttons) go below its text.
  if (!worded && out.length && m.text) out.unshift(textEl(m.text));
  return out.length ? out : [textEl(m.text || "")];
}

// Slack's feedback buttons under a reply (a context_actions block's feedback_buttons): a click
// is the block_actions Slack sends the app; the one clicked last shows pressed.
function feedbackEl(channel, ts, e) {
  const bar = el("div", "feedback");
  const key = lineKey(channel, ts);
  for (const [side, value] of [["positive_button", "positive"], ["negative_button", "negative"]]) {
    const b = e[side] || {};
    const btn = el("button", "feedback-btn");
    // A drawn thumb (no emoji font needed); the button's own text stays for screen readers.
    btn.append(thumbEl(value === "negative"), el("span", "sr-only", (b.text && b.text.text) || (value === "positive" ? "👍" : "👎")));
    btn.type = "button"; btn.dataset.value = value;
    btn.setAttribute("aria-label", b.accessibility_label || (value === "positive" ? "Good answer" : "Bad answer"));
    btn.setAttribute("aria-pressed", String(S.feedback.get(key) === value));
    btn.onclick = () => sendFeedback(channel, ts, value, bar);
    bar.append(btn);
  }
  return bar;
}

function thumbEl(down) {
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("viewBox", "0 0 16 16"); svg.setAttribute("aria-hidden", "true");
  svg.classList.add("thumb");
  svg.innerHTML = '<g fill="currentColor"' + (down ? ' transform="rotate(180 8 8)"' : "") + '>' +
    '<rect x="1" y="7" width="3" height="8" rx="0.5"/>' +
    '<path d="M5 7 L8 1.5 C9 1.5 9.8 2.3 9.5 3.5 L9 6 H13.5 C14.4 6 15 6.8 14.8 7.6 L13.6 13.6 C13.4 14.4 12.8 15 12 15 H5 Z"/></g>';
  return svg;
}

async function sendFeedback(channel, ts, value, bar) {
  for (const b of bar.querySelectorAll("button")) b.disabled = true;
  const r = await fetch("/api/feedback", {
    method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ channel, ts, positive: value === "positive" }),
  });
  if (r.ok) S.feedback.set(lineKey(channel, ts), value);
  for (const b of bar.querySelectorAll("button")) {
    b.disabled = false;
    b.setAttribute("aria-pressed", String(r.ok ? b.dataset.value === value : b.getAttribute("aria-pressed") === "true"));
  }
}

// A message's files (a person's drop, an agent's send_file): raster images as pictures,
// anything else as a chip with its name and size; both open /files/<id>.
const INLINE_TYPES = ["image/png", "image/jpeg", "image/gif", "image/webp"];

function filesEl(files) {
  const box = el("div", "files");
  for (const f of files) {
    if (!f.id) continue;
    const href = "/files/" + encodeURIComponent(f.id);
    if (INLINE_TYPES.includes(f.mimetype)) {
      const a = el("a", "file-link"); a.href = href; a.target = "_blank"; a.rel = "noreferrer";
      const img = el("img", "file-image"); img.src = href; img.alt = f.title || f.name || "image";
      img.dataset.name = f.name || "";
      a.append(img); box.append(a);
    } else {
      const a = fileChip(f.name || f.id, f.size, f.pretty_type || f.filetype);
      a.href = href; a.target = "_blank"; a.rel = "noreferrer";
      box.append(a);
    }
  }
  return box;
}

function fileChip(name, size, kind) {
  const a = el("a", "file-chip");
  a.dataset.name = name;
  // The file's kind on a coloured tile, as Slack shows it (no emoji font needed).
  const ext = (name.includes(".") ? name.split(".").pop() : "file").slice(0, 4).toUpperCase();
  const icon = el("span", "icon", ext);
  icon.style.background = colorOf(ext);
  a.append(icon, el("span", "name", name));
  const what = [kind, size !== undefined ? sizeOf(size) : ""].filter(Boolean).join(" · ");
  if (what) a.append(el("span", "size", what));
  return a;
}

function sizeOf(n) {
  return n < 1024 ? `${n} B` : n < 1048576 ? `${(n / 1024).toFixed(1)} KB` : `${(n / 1048576).toFixed(1)} MB`;
}

async function click(channel, ts, e, bar) {
  for (const b of bar.querySelectorAll("button")) b.disabled = true;
  const r = await fetch("/api/click", {
    method: "POST", headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ channel, ts, action_id: e.action_id, value: e.value }),
  });
  if (!r.ok) for (const b of bar.querySelectorAll("button")) b.disabled = false;
}

// Slack's mrkdwn, the parts the bots use: mentions, links, *bold*, _italic_, `code`, > quotes.
function textEl(src, cls = "text") {
  const d = el("div", cls);
  const lines = escapeHtml(src).split("\n").map((line) =>
    line.startsWith("&gt; ") || line === "&gt;" ? `<blockquote>${line.replace(/^&gt; ?/, "")}</blockquote>` : line);
  d.innerHTML = lines.join("\n")
    .replace(/&lt;@([A-Z0-9]+)(?:\|[^&]*)?&gt;/g, (_, id) => `<span class="mention">@${escapeHtml(nameOf(id))}</span>`)
    .replace(/&lt;#([A-Z0-9]+)(?:\|([^&]*))?&gt;/g, (_, id, label) => `<span class="mention">#${escapeHtml(label || channelLabel(id))}</span>`)
    .replace(/&lt;(https?:[^|&]+)\|([^&]+)&gt;/g, '<a href="$1" rel="noreferrer">$2</a>')
    .replace(/(^|[\s(])\*([^*\n]+)\*/g, "$1<b>$2</b>")
    .replace(/(^|[\s(])_([^_\n]+)_/g, "$1<i>$2</i>")
    .replace(/`([^`\n]+)`/g, "<code>$1</code>")
    .replace(/:([a-z0-9_+-]+):/g, (code, name) => (Object.hasOwn(EMOJI, name) ? EMOJI[name] : code))
    .replace(/<\/blockquote>\n/g, "</blockquote>");
  return d;
}

// Standard Markdown of a markdown_text post, the parts Slack renders: **bold**, _italic_,
// ~~strike~~, `code`, fenced code blocks, lists, tables, headings, > quotes, [links](https://…),
// mentions. Safe by construction: the source is HTML-escaped first; only tags made here are added.
function markdownEl(src) {
  const d = el("div", "text md");
  const lines = escapeHtml(src).split("\n");
  const out = [];
  for (let i = 0; i < lines.length; ) {
    const line = lines[i];
    const fence = line.match(/^ {0,3}(`{3,}|~{3,})/);
    if (fence) {
      const body = [];
      for (i++; i < lines.length && !(lines[i].trim().startsWith(fence[1]) && /^[`~]+$/.test(lines[i].trim())); i++) body.push(lines[i]);
      i++;
      out.push(`<pre><code>${body.join("\n")}</code></pre>`);
    } else if (/^\s*\|.*\|\s*$/.test(line) && i + 1 < lines.length && /^\s*\|?\s*:?-{2,}/.test(lines[i + 1])) {
      const cells = (l) => l.trim().replace(/^\||\|$/g, "").split("|").map((c) => inlineMd(c.trim()));
      const head = cells(line).map((c) => `<th>${c}</th>`).join("");
      const rows = [];
      for (i += 2; i < lines.length && /^\s*\|/.test(lines[i]); i++) rows.push(`<tr>${cells(lines[i]).map((c) => `<td>${c}</td>`).join("")}</tr>`);
      out.push(`<table><thead><tr>${head}</tr></thead><tbody>${rows.join("")}</tbody></table>`);
    } else if (/^\s*([-*+]|\d+[.)])\s+/.test(line)) {
      const ordered = /^\s*\d/.test(line);
      const items = [];
      for (; i < lines.length && /^\s*([-*+]|\d+[.)])\s+/.test(lines[i]); i++) items.push(`<li>${inlineMd(lines[i].replace(/^\s*([-*+]|\d+[.)])\s+/, ""))}</li>`);
      out.push(ordered ? `<ol>${items.join("")}</ol>` : `<ul>${items.join("")}</ul>`);
    } else if (/^#{1,6}\s/.test(line)) {
      out.push(`<div class="md-h">${inlineMd(line.replace(/^#+\s+/, ""))}</div>`); i++;
    } else if (/^&gt; ?/.test(line)) {
      const quoted = [];
      for (; i < lines.length && /^&gt; ?/.test(lines[i]); i++) quoted.push(inlineMd(lines[i].replace(/^&gt; ?/, "")));
      out.push(`<blockquote>${quoted.join("<br>")}</blockquote>`);
    } else if (!line.trim()) {
      i++;
    } else {
      const para = [];
      for (; i < lines.length && lines[i].trim() && !/^ {0,3}(`{3,}|~{3,})|^\s*([-*+]|\d+[.)])\s+|^#{1,6}\s|^&gt;|^\s*\|/.test(lines[i]); i++) para.push(inlineMd(lines[i]));
      if (!para.length) para.push(inlineMd(lines[i++]));
      out.push(`<p>${para.join("<br>")}</p>`);
    }
  }
  d.innerHTML = out.join("");
  return d;
}

// One line of (escaped) Markdown: code spans are kept as they are, the rest formatted.
function inlineMd(s) {
  return s.split(/(`[^`]+`)/).map((part, k) => (k % 2 ? `<code>${part.slice(1, -1)}</code>` : part
    .replace(/&lt;@([A-Z0-9]+)(?:\|[^&]*)?&gt;/g, (_, id) => `<span class="mention">@${escapeHtml(nameOf(id))}</span>`)
    .replace(/\[([^\]]+)\]\((https?:\/\/[^\s)]+)\)/g, '<a href="$2" rel="noreferrer">$1</a>')
    .replace(/\*\*([^*]+)\*\*|__([^_]+)__/g, (_, a, b) => `<strong>${a || b}</strong>`)
    .replace(/(^|[\s(])[*_]([^*_\n]+)[*_]/g, "$1<em>$2</em>")
    .replace(/~~([^~]+)~~/g, "<s>$1</s>")
    .replace(/:([a-z0-9_+-]+):/g, (code, name) => (Object.hasOwn(EMOJI, name) ? EMOJI[name] : code)))).join("");
}

function nameOf(id) { const u = S.users.get(id); return u ? u.name : id; }
function channelLabel(id) { const c = S.convs.get(id); return c ? c.label : id; }
function colorOf(name) { let h = 0; for (const ch of name) h = (h * 31 + ch.charCodeAt(0)) >>> 0; return COLORS[h % COLORS.length]; }
function timeOf(ts) { return new Date(parseFloat(ts) * 1000).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" }); }
function escapeHtml(s) { return s.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;"); }
function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

// ---- composing ---------------------------------------------------------------------------
async function send(form, threadTs) {
  const ta = form.querySelector("textarea");
  const text = ta.value.trim();
  const file = form.attached || null;
  if (!text && !file) return;
  const channel = threadTs ? S.thread.channel : S.current;
  ta.value = "";
  attach(form, null);
  // With a file the message is a file share (the text its comment), as in Slack's client.
  const [path, body] = file
    ? ["/api/file", { channel, text, thread_ts: threadTs || null, name: file.name, mimetype: file.type, data: await base64Of(file) }]
    : ["/api/post", { channel, text, thread_ts: threadTs || null }];
  const r = await fetch(path, {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body),
  });
  const answer = await r.json();
  if (!answer.ok) { ta.value = text; if (file) attach(form, file); return; }
  // The bots answer in a thread under a new message: show it straight away.
  if (!threadTs) openThread(channel, answer.ts);
}

function base64Of(file) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(String(reader.result).replace(/^data:[^,]*,/, ""));
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(file);
  });
}

// The file a composer will send with its next message (picked, dropped or pasted); null clears it.
function attach(form, file) {
  form.attached = file;
  const box = form.querySelector(".attachment");
  box.replaceChildren();
  box.hidden = !file;
  if (!file) return;
  const chip = fileChip(file.name, file.size, file.type);
  const remove = el("button", "remove", "×");
  remove.type = "button"; remove.title = "Remove the file";
  remove.onclick = () => attach(form, null);
  chip.append(remove);
  box.append(chip);
}

function wireFiles(form, pane) {
  const input = form.querySelector(".file-input");
  form.querySelector(".attach").onclick = () => input.click();
  input.onchange = () => { if (input.files.length) attach(form, input.files[0]); input.value = ""; };
  form.querySelector("textarea").addEventListener("paste", (e) => {
    const files = e.clipboardData && e.clipboardData.files;
    if (files && files.length) { e.preventDefault(); attach(form, files[0]); }
  });
  const carries = (e) => e.dataTransfer && [...e.dataTransfer.types].includes("Files");
  pane.addEventListener("dragover", (e) => { if (carries(e)) { e.preventDefault(); form.classList.add("dropping"); } });
  pane.addEventListener("dragleave", () => form.classList.remove("dropping"));
  pane.addEventListener("drop", (e) => {
    form.classList.remove("dropping");
    if (!carries(e) || !e.dataTransfer.files.length) return;
    e.preventDefault();
    attach(form, e.dataTransfer.files[0]);
    form.querySelector("textarea").focus();
  });
}

const menu = { box: null, ta: null, items: [], active: 0, start: 0 };

function mentionQuery(ta) {
  const before = ta.value.slice(0, ta.selectionStart);
  const m = /(^|\s)@([\w-]*)$/.exec(before);
  return m ? { query: m[2].toLowerCase(), start: before.length - m[2].length - 1 } : null;
}

function updateMenu(ta) {
  const q = mentionQuery(ta);
  const names = [...S.users.values()].filter((u) => u.bot).map((u) => u.name);
  const items = q ? names.filter((n) => n.toLowerCase().startsWith(q.query)) : [];
  if (!items.length) return closeMenu();
  Object.assign(menu, { ta, items, start: q.start, active: Math.min(menu.active, items.length - 1) });
  const box = $("mention-menu");
  box.replaceChildren();
  items.forEach((n, i) => {
    const li = el("li", i === menu.active ? "active" : "");
    li.dataset.name = n;
    const av = el("span", "avatar", n.slice(0, 1).toUpperCase()); av.style.background = colorOf(n);
    li.append(av, el("span", "", n));
    li.onmousedown = (e) => { e.preventDefault(); pick(n); };
    box.append(li);
  });
  const rect = ta.getBoundingClientRect();
  box.style.left = rect.left + "px";
  box.style.bottom = (window.innerHeight - rect.top + 6) + "px";
  box.hidden = false;
}

function closeMenu() { $("mention-menu").hidden = true; menu.items = []; menu.active = 0; }

function pick(name) {
  const ta = menu.ta, caret = ta.selectionStart;
  ta.value = ta.value.slice(0, menu.start) + "@" + name + " " + ta.value.slice(caret);
  const pos = menu.start + name.length + 2;
  ta.setSelectionRange(pos, pos);
  closeMenu(); ta.focus();
}

function wireComposer(form, threadTs) {
  const ta = form.querySelector("textarea");
  form.onsubmit = (e) => { e.preventDefault(); closeMenu(); send(form, threadTs()); };
  ta.addEventListener("input", () => updateMenu(ta));
  ta.addEventListener("blur", () => setTimeout(closeMenu, 100));
  ta.addEventListener("keydown", (e) => {
    const open = !$("mention-menu").hidden && menu.ta === ta;
    if (open && (e.key === "ArrowDown" || e.key === "ArrowUp")) {
      e.preventDefault();
      menu.active = (menu.active + (e.key === "ArrowDown" ? 1 : menu.items.length - 1)) % menu.items.length;
      updateMenu(ta);
    } else if (open && (e.key === "Enter" || e.key === "Tab")) {
      e.preventDefault(); pick(menu.items[menu.active]);
    } else if (open && e.key === "Escape") {
      closeMenu();
    } else if (e.key === "Enter" && !e.shiftKey) {
      e.preventDefault(); form.requestSubmit();
    }
  });
}

wireComposer($("composer"), () => null);
wireComposer($("thread-composer"), () => S.thread && S.thread.ts);
wireFiles($("composer"), $("main"));
wireFiles($("thread-composer"), $("thread"));
$("close-thread").onclick = () => { S.thread = null; renderThread(); };
$("show-notes").onchange = (e) => document.body.classList.toggle("hide-notes", !e.target.checked);
connect();
