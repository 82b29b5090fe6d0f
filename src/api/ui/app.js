// The live view: sign-in, the streams' grid (server-sent events), live
// pictures (MJPEG read with fetch, so that the token goes in a header, never
// in a URL), events and counts, and adding or removing cameras (operators).
// Every URL is relative to the page (ROOT/ui/): it works behind a path prefix.
'use strict';

const ROOT = new URL('../', location.href);
const KEY = 'infer-stream-token';
const FPS = 5;
const $ = (id) => document.getElementById(id);

let token = null;
let role = null;
let running = new AbortController();
const cards = new Map(); // stream id -> { card, img, fields, stop }
const counts = new Map(); // "stream\u0000place" -> { stream, place, text }

function status(text) { $('status').textContent = text; }

function api(path, opts = {}) {
  const headers = Object.assign({}, opts.headers || {});
  if (token) headers.Authorization = 'Bearer ' + token;
  return fetch(new URL(path, ROOT), Object.assign({}, opts, { headers, cache: 'no-store' }));
}

async function errorOf(r) {
  try { const b = await r.json(); return b.error || (r.status + ' ' + r.statusText); } catch (_) { return r.status + ' ' + r.statusText; }
}

const sleep = (ms) => new Promise((ok) => setTimeout(ok, ms));

// `#token=T`: sign in with T (for automation); the fragment never reaches the server and is taken off the address.
function takeFragmentToken() {
  const m = /^#token=(.+)$/.exec(location.hash);
  if (m) {
    sessionStorage.setItem(KEY, decodeURIComponent(m[1]));
    history.replaceState(null, '', location.pathname + location.search);
  }
}

async function start() {
  takeFragmentToken();
  token = sessionStorage.getItem(KEY);
  let r;
  try { r = await api('v1/me'); } catch (e) { status('cannot reach the API: ' + e.message); return; }
  if (r.status === 401) {
    const had = token !== null;
    token = null;
    sessionStorage.removeItem(KEY);
    showSignin(had ? 'the token is not valid' : '');
    return;
  }
  if (!r.ok) { status('the API answered ' + (await errorOf(r))); return; }
  const me = await r.json();
  role = me.role;
  showApp(me.auth);
}

function showSignin(message) {
  $('app').hidden = true;
  $('signin').hidden = false;
  $('signin-error').textContent = message;
  $('token').focus();
}

async function signIn(ev) {
  ev.preventDefault();
  const t = $('token').value.trim();
  token = t;
  let r;
  try { r = await api('v1/me'); } catch (e) { $('signin-error').textContent = 'cannot reach the API: ' + e.message; return; }
  if (!r.ok) {
    token = null;
    $('signin-error').textContent = r.status === 401 ? 'the token is not valid' : await errorOf(r);
    return;
  }
  sessionStorage.setItem(KEY, t);
  $('token').value = '';
  const me = await r.json();
  role = me.role;
  showApp(me.auth);
}

function signOut() {
  sessionStorage.removeItem(KEY);
  running.abort();
  location.reload();
}

const canOperate = () => role === 'operator' || role === 'admin';

function showApp(auth) {
  $('signin').hidden = true;
  $('app').hidden = false;
  $('who').textContent = auth ? 'signed in: ' + role : 'no sign-in (the API is open to this machine)';
  $('signout').hidden = !auth;
  if (canOperate()) setUpAdd();
  keep('v1/live/streams', onStreams);
  keep('v1/results?kind=event', (kind, data) => { if (kind === 'event') onEvent(JSON.parse(data)); });
  api('v1/pipeline').then((r) => (r.ok ? r.json() : null)).then((p) => { if (p) $('pipeline').textContent = p.name; }).catch(() => {});
}

// Server-sent events read with fetch (EventSource cannot send the token), reconnecting after a second.
async function keep(path, onEvent) {
  const signal = running.signal;
  while (!signal.aborted) {
    try {
      const r = await api(path, { signal });
      if (!r.ok) throw new Error(await errorOf(r));
      const reader = r.body.getReader();
      const dec = new TextDecoder();
      let buf = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true });
        let i;
        while ((i = buf.indexOf('\n\n')) >= 0) {
          const block = buf.slice(0, i);
          buf = buf.slice(i + 2);
          let kind = 'message';
          const data = [];
          for (const line of block.split('\n')) {
            if (line.startsWith('event:')) kind = line.slice(6).trim();
            else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
          }
          if (data.length) onEvent(kind, data.join('\n'));
        }
      }
    } catch (e) {
      if (signal.aborted) return;
      status(path.split('?')[0] + ': ' + e.message + '; retrying');
    }
    await sleep(1000);
  }
}

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

function onStreams(kind, data) {
  if (kind !== 'streams') return;
  const body = JSON.parse(data);
  const seen = new Set();
  for (const s of body.streams) {
    seen.add(s.id);
    let c = cards.get(s.id);
    if (!c) c = addCard(s);
    c.state.textContent = s.state;
    c.state.className = 'state state-' + s.state;
    c.card.dataset.state = s.state;
    c.fields.fps.textContent = s.fps.toFixed(1);
    c.fields.drops.textContent = s.drops;
    c.fields.gaps.textContent = s.gaps;
    c.fields.frames.textContent = s.frames;
    c.error.textContent = s.last_error || '';
  }
  for (const [id, c] of cards) {
    if (!seen.has(id)) { c.stop.abort(); c.card.remove(); cards.delete(id); }
  }
  if (body.live) $('live-stats').textContent = body.live.viewers + ' viewer(s), ' + body.live.encoded + ' pictures, ' + body.live.dropped + ' dropped for slow viewers';
  status('updated ' + new Date().toLocaleTimeString());
}

function addCard(s) {
  const card = el('article', 'card');
  card.dataset.stream = s.id;
  const h = el('h3');
  h.append(el('span', 'name', s.id));
  const state = el('span', 'state');
  h.append(state);
  card.append(h);
  const img = el('img');
  img.alt = 'live picture of ' + s.id;
  card.append(img);
  const dl = el('dl');
  const fields = {};
  for (const k of ['fps', 'frames', 'drops', 'gaps']) {
    dl.append(el('dt', '', k));
    fields[k] = el('dd', 'f-' + k);
    dl.append(fields[k]);
  }
  card.append(dl);
  const error = el('p', 'error');
  card.append(error);
  if (canOperate() && s.dynamic) {
    const b = el('button', 'remove', 'Remove');
    b.type = 'button';
    b.addEventListener('click', async () => {
      b.disabled = true;
      const r = await api('v1/streams/' + encodeURIComponent(s.id), { method: 'DELETE' }).catch((e) => ({ ok: false, e }));
      if (!r.ok) { error.textContent = r.e ? r.e.message : await errorOf(r); b.disabled = false; }
    });
    card.append(b);
  }
  $('grid').append(card);
  const stop = new AbortController();
  running.signal.addEventListener('abort', () => stop.abort());
  const c = { card, img, fields, state, error, stop };
  cards.set(s.id, c);
  watch(s.id, img, stop.signal);
  return c;
}

function find(buf, pat, from) {
  outer: for (let i = from; i + pat.length <= buf.length; i++) {
    for (let j = 0; j < pat.length; j++) if (buf[i + j] !== pat[j]) continue outer;
    return i;
  }
  return -1;
}

// The live picture: MJPEG parts (each with its Content-Length) shown as blobs.
async function watch(id, img, signal) {
  const CRLF2 = [13, 10, 13, 10];
  while (!signal.aborted) {
    try {
      const r = await api('v1/streams/' + encodeURIComponent(id) + '/live.mjpeg?fps=' + FPS, { signal });
      if (!r.ok) throw new Error(await errorOf(r));
      const reader = r.body.getReader();
      let buf = new Uint8Array(0);
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        const n = new Uint8Array(buf.length + value.length);
        n.set(buf);
        n.set(value, buf.length);
        buf = n;
        for (;;) {
          const end = find(buf, CRLF2, 0);
          if (end < 0) break;
          const head = new TextDecoder().decode(buf.subarray(0, end));
          const m = /content-length:\s*(\d+)/i.exec(head);
          if (!m) throw new Error('a picture without its length');
          const start = end + 4;
          const len = Number(m[1]);
          if (buf.length < start + len + 2) break;
          const url = URL.createObjectURL(new Blob([buf.slice(start, start + len)], { type: 'image/jpeg' }));
          const old = img.dataset.url;
          img.src = url;
          img.dataset.url = url;
          img.dataset.frames = String(Number(img.dataset.frames || 0) + 1);
          if (old) URL.revokeObjectURL(old);
          buf = buf.slice(start + len + 2);
        }
      }
    } catch (e) {
      if (signal.aborted) return;
    }
    await sleep(1000);
  }
}

function onEvent(e) {
  const li = el('li');
  li.dataset.event = e.event;
  const what = [e.stream, e.event];
  for (const k of ['line', 'direction', 'zone', 'track_id', 'reason', 'gap_ms']) if (e[k] !== undefined) what.push(k + '=' + e[k]);
  li.textContent = new Date().toLocaleTimeString() + ' ' + what.join(' ');
  const list = $('events');
  list.prepend(li);
  while (list.children.length > 200) list.lastChild.remove();
  if (e.event === 'crossed' && e.line) bump(e.stream, 'line ' + e.line, (c) => { c[e.direction] = (c[e.direction] || 0) + 1; });
  if ((e.event === 'entered' || e.event === 'left') && e.zone) bump(e.stream, 'zone ' + e.zone, (c) => { c[e.event] = (c[e.event] || 0) + 1; });
}

function bump(stream, place, change) {
  const key = stream + '\u0000' + place;
  let c = counts.get(key);
  if (!c) {
    const tr = el('tr');
    c = { tr, n: {}, cell: el('td') };
    tr.append(el('td', '', stream), el('td', '', place), c.cell);
    $('counts').tBodies[0].append(tr);
    counts.set(key, c);
  }
  change(c.n);
  c.cell.textContent = Object.entries(c.n).map(([k, v]) => k + ' ' + v).join(', ');
}

async function setUpAdd() {
  const r = await api('v1/pipeline').catch(() => null);
  if (!r || !r.ok) return;
  const p = await r.json();
  if (!p.templates.length) return;
  const select = $('add-source');
  select.replaceChildren();
  for (const t of p.templates) {
    const o = el('option', '', t.source + ' (' + t.kind + ')');
    o.value = t.source;
    select.append(o);
  }
  const fields = () => {
    const t = p.templates.find((t) => t.source === select.value);
    const box = $('add-fields');
    box.replaceChildren();
    for (const k of t.allow) {
      const l = el('label', '', k + ' ');
      const i = el('input');
      i.name = k;
      i.dataset.key = k;
      i.placeholder = k === 'required' ? 'true / false' : '(template default)';
      l.append(i);
      box.append(l);
    }
  };
  select.addEventListener('change', fields);
  fields();
  $('add').hidden = false;
  $('add-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const body = { source: select.value, id: $('add-id').value.trim() };
    for (const i of $('add-fields').querySelectorAll('input')) {
      const v = i.value.trim();
      if (v === '') continue;
      body[i.dataset.key] = v === 'true' ? true : v === 'false' ? false : /^-?\d+(\.\d+)?$/.test(v) ? Number(v) : v;
    }
    $('add-error').textContent = '';
    const r = await api('v1/streams', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) }).catch((e) => ({ ok: false, e }));
    if (!r.ok) { $('add-error').textContent = r.e ? r.e.message : await errorOf(r); return; }
    $('add-id').value = '';
    for (const i of $('add-fields').querySelectorAll('input')) i.value = '';
  });
}

document.addEventListener('DOMContentLoaded', () => {
  $('signin-form').addEventListener('submit', signIn);
  $('signout').addEventListener('click', signOut);
  start();
});
