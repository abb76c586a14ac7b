// rotor's chat page: the conversation is kept here and sent whole to
// POST /v1/chat/completions with stream:true; the reply is read as
// server-sent events from fetch()'s body. Stop aborts the fetch, and the
// server cancels the sequence when the connection closes.
'use strict';

const $ = (id) => document.getElementById(id);

// The KV fields each policy reads (the server refuses the others).
const KV_USES = {
  full: [],
  sink: ['kv_size', 'kv_keep', 'kv_positions'],
  window: ['kv_size', 'kv_positions'],
  h2o: ['kv_size', 'kv_positions'],
  tova: ['kv_size', 'kv_positions'],
  snapkv: ['kv_size', 'kv_positions'],
};
const POLICY_FIELDS = ['kv_size', 'kv_keep', 'kv_positions'];
const NUMBER_FIELDS = ['temperature', 'top_k', 'top_p', 'min_p', 'max_tokens', 'seed',
                       'kv_size', 'kv_keep'];
const INTEGER_FIELDS = new Set(['top_k', 'max_tokens', 'seed', 'kv_size', 'kv_keep']);
const STORE_KEY = 'rotor.chat.settings';

const chat = {
  history: [],        // {role, content} sent with every request
  controller: null,   // the running request's AbortController
};

function setBusy(busy) {
  $('send').disabled = busy;
  $('stop').disabled = !busy;
  $('new-chat').disabled = busy;
  // Screen readers announce the reply once it is whole, not at every frame.
  $('log').setAttribute('aria-busy', busy ? 'true' : 'false');
}

function addMessage(role, text) {
  $('empty').hidden = true;
  const li = document.createElement('li');
  li.className = `msg ${role}`;
  const who = document.createElement('span');
  who.className = 'who';
  who.textContent = role === 'user' ? 'You' : role === 'assistant' ? 'rotor' : 'Error';
  const body = document.createElement('span');
  body.className = 'text';
  body.textContent = text;
  li.append(who, body);
  const log = $('log');
  log.append(li);
  log.scrollTop = log.scrollHeight;
  return li;
}

// Keeps the newest text in view unless the reader has scrolled up. (Not
// scrollIntoView per chunk: Chromium stalls on it at hundreds of chunks/s.)
function followLog(wasAtBottom) {
  const log = $('log');
  if (wasAtBottom) log.scrollTop = log.scrollHeight;
}

function atBottom() {
  const log = $('log');
  return log.scrollHeight - log.scrollTop - log.clientHeight < 40;
}

function addNote(li, text) {
  const note = document.createElement('span');
  note.className = 'note';
  note.textContent = text;
  li.append(note);
}

// The request's settings: empty fields are left out (the server's defaults).
function requestFields() {
  const out = {};
  const policy = $('kv').value;
  for (const name of NUMBER_FIELDS) {
    const el = $(name);
    if (el.disabled || el.value.trim() === '') continue;
    const v = Number(el.value);
    if (!Number.isFinite(v) || (INTEGER_FIELDS.has(name) && !Number.isInteger(v)))
      throw new Error(`${el.labels[0].textContent}: "${el.value}" is not a valid number`);
    out[name] = v;
  }
  if (policy) out.kv = policy;
  for (const name of ['kv_positions', 'kv_type'])
    if (!$(name).disabled && $(name).value) out[name] = $(name).value;
  if ($('ignore_eos').checked) out.ignore_eos = true;
  return out;
}

// Greys out the KV fields the chosen policy does not read.
function updatePolicyFields() {
  const uses = KV_USES[$('kv').value];
  for (const name of POLICY_FIELDS) $(name).disabled = uses !== undefined && !uses.includes(name);
}

function saveSettings() {
  const s = {system: $('system').value, ignore_eos: $('ignore_eos').checked};
  for (const name of [...NUMBER_FIELDS, 'kv', 'kv_positions', 'kv_type']) s[name] = $(name).value;
  try { localStorage.setItem(STORE_KEY, JSON.stringify(s)); } catch (e) { /* private mode */ }
}

function loadSettings() {
  let s = null;
  try { s = JSON.parse(localStorage.getItem(STORE_KEY) || 'null'); } catch (e) { s = null; }
  if (!s || typeof s !== 'object') return;
  for (const [k, v] of Object.entries(s)) {
    const el = $(k);
    if (!el) continue;
    if (el.type === 'checkbox') el.checked = v === true;
    else if (typeof v === 'string') el.value = v;
  }
}

// Reads one SSE stream: calls onEvent(json) per "data:" line until [DONE].
async function readEvents(response, onEvent) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  for (;;) {
    const {value, done} = await reader.read();
    if (done) return false;
    buffer += decoder.decode(value, {stream: true});
    let cut;
    while ((cut = buffer.indexOf('\n\n')) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      for (const line of block.split('\n')) {
        if (!line.startsWith('data:')) continue;
        const data = line.slice(5).trim();
        if (data === '[DONE]') return true;
        onEvent(JSON.parse(data));
      }
    }
  }
}

async function errorText(response) {
  try {
    const body = await response.json();
    if (body && body.error && body.error.message) return body.error.message;
  } catch (e) { /* not JSON */ }
  return `HTTP ${response.status}`;
}

function formatRate(tokens, ms) {
  return ms > 0 ? `${(tokens * 1000 / ms).toFixed(1)} tokens/s` : '';
}

async function send(text) {
  let fields;
  try {
    fields = requestFields();
  } catch (e) {
    addMessage('error', e.message);
    return;
  }
  saveSettings();
  const user = {role: 'user', content: text};
  const messages = [];
  if ($('system').value.trim()) messages.push({role: 'system', content: $('system').value});
  messages.push(...chat.history, user);
  addMessage('user', text);
  const li = addMessage('assistant', '');
  li.classList.add('streaming');
  const out = li.querySelector('.text');
  const controller = new AbortController();
  chat.controller = controller;
  setBusy(true);
  $('state').textContent = 'waiting for the first token…';
  $('speed').textContent = '';

  const started = performance.now();
  let first = 0;  // when the first and the last text arrived
  let last = 0;
  let chunks = 0;
  let usage = null;
  let finish = null;
  let serverError = null;
  let reply = '';
  let ended = false;
  let frame = 0;
  try {
    const response = await fetch('v1/chat/completions', {
      method: 'POST',
      headers: {'Content-Type': 'application/json'},
      body: JSON.stringify({messages, stream: true, stream_options: {include_usage: true},
                            ...fields}),
      signal: controller.signal,
    });
    if (!response.ok) throw new Error(await errorText(response));
    ended = await readEvents(response, (ev) => {
      if (ev.error) {
        serverError = ev.error.message || 'server error';
        return;
      }
      if (ev.usage) usage = ev.usage;
      const choice = ev.choices && ev.choices[0];
      if (!choice) return;
      if (choice.finish_reason) finish = choice.finish_reason;
      const delta = choice.delta && choice.delta.content;
      if (!delta) return;
      last = performance.now();
      if (!first) first = last;
      chunks += 1;
      reply += delta;
      // One DOM update per frame, however many chunks arrived in it.
      if (!frame) {
        frame = requestAnimationFrame(() => {
          frame = 0;
          const follow = atBottom();
          out.textContent = reply;
          $('state').textContent = 'generating…';
          $('speed').textContent = formatRate(chunks - 1, performance.now() - first);
          followLog(follow);
        });
      }
    });
    if (serverError) throw new Error(serverError);
    if (!ended) throw new Error('the connection closed before the reply ended');
  } catch (e) {
    if (e.name === 'AbortError') {
      finish = 'stopped';
    } else {
      li.classList.add('error');
      addNote(li, e.message);
      finish = 'error';
    }
  } finally {
    if (frame) cancelAnimationFrame(frame);
    const follow = atBottom();
    out.textContent = reply;
    followLog(follow);
    chat.controller = null;
    li.classList.remove('streaming');
    setBusy(false);
  }
  const elapsed = performance.now() - started;
  // The exchange stays in the history (a stopped reply with what it had), so the
  // next turn continues the conversation as shown.
  if (finish !== 'error') chat.history.push(user, {role: 'assistant', content: reply});
  const generated = usage ? usage.completion_tokens : chunks;
  // Decode speed from the first token to the last; when the reply came in one
  // burst (a proxy that buffers), the whole request's time is all there is.
  const decodeMs = last - first;
  const rate = decodeMs >= 50 ? formatRate(Math.max(0, generated - 1), decodeMs)
                              : `${formatRate(generated, elapsed)} (end to end)`;
  li.dataset.finish = finish || '';
  if (finish === 'error') {
    $('state').textContent = 'error';
    $('speed').textContent = '';
    return;
  }
  addNote(li, [finish === 'stopped' ? 'stopped' : finish ? `finish: ${finish}` : '',
               `${generated} tokens`, rate,
               first ? `first token ${(first - started).toFixed(0)} ms` : ''].filter(Boolean).join(' · '));
  $('state').textContent = finish === 'stopped' ? 'stopped' : 'idle';
  $('speed').textContent = rate;
  if (usage) {
    const cached = (usage.prompt_tokens_details || {}).cached_tokens || 0;
    $('usage').textContent = `prompt ${usage.prompt_tokens} tokens (${cached} from the prefix cache)` +
                             ` · reply ${usage.completion_tokens} · ${(elapsed / 1000).toFixed(2)} s`;
  } else {
    $('usage').textContent = `reply ${chunks} chunks · ${(elapsed / 1000).toFixed(2)} s`;
  }
  await refreshCache();
}

// The cache footer, from the server's Prometheus metrics.
function metric(text, name) {
  const m = text.match(new RegExp(`^${name}(?:\\{[^}]*\\})? ([0-9.eE+-]+)$`, 'm'));
  return m ? Number(m[1]) : null;
}

// One request at a time; a refresh asked for meanwhile runs after it (its
// numbers would otherwise be older than the reply that asked).
let refreshing = false;
let refreshAgain = false;
async function refreshCache() {
  if (refreshing) {
    refreshAgain = true;
    return;
  }
  refreshing = true;
  let text;
  try {
    const r = await fetch('metrics', {cache: 'no-store'});
    if (!r.ok) return;
    text = await r.text();
  } catch (e) {
    return;  // the server went away: the next reply says so
  } finally {
    refreshing = false;
    if (refreshAgain) {
      refreshAgain = false;
      setTimeout(refreshCache, 0);
    }
  }
  const used = metric(text, 'rotor_kv_blocks_used');
  const cachedBlocks = metric(text, 'rotor_kv_blocks_cached');
  const blocks = metric(text, 'rotor_kv_blocks');
  const hits = metric(text, 'rotor_prefix_cache_hit_tokens_total');
  const queries = metric(text, 'rotor_prefix_cache_query_tokens_total');
  const parts = [];
  if (blocks !== null && used !== null)
    parts.push(`KV blocks: ${used} used, ${cachedBlocks ?? 0} cached, ${blocks} in all`);
  if (hits !== null && queries)
    parts.push(`prefix cache: ${hits} of ${queries} prompt tokens hit (${(100 * hits / queries).toFixed(0)}%)`);
  $('cache').textContent = parts.join(' · ');
}

async function loadModel() {
  try {
    const r = await fetch('v1/models');
    if (!r.ok) throw new Error(await errorText(r));
    const m = (await r.json()).data[0];
    const meta = m.meta || {};
    $('model').textContent = `${m.id} · context ${meta.n_ctx} · ${meta.chat_template} template`;
  } catch (e) {
    $('model').textContent = `server not ready: ${e.message}`;
  }
}

function init() {
  loadSettings();
  updatePolicyFields();
  // On a phone the settings start folded (and fold when the screen narrows).
  const narrow = window.matchMedia('(max-width: 760px)');
  if (narrow.matches) $('settings-box').open = false;
  narrow.addEventListener('change', (e) => { if (e.matches) $('settings-box').open = false; });
  $('kv').addEventListener('change', updatePolicyFields);
  $('settings').addEventListener('change', saveSettings);
  $('composer').addEventListener('submit', (e) => {
    e.preventDefault();
    const text = $('prompt').value;
    if (!text.trim() || chat.controller) return;
    $('prompt').value = '';
    send(text);
  });
  $('prompt').addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      $('composer').requestSubmit();
    } else if (e.key === 'Escape' && chat.controller) {
      chat.controller.abort();
    }
  });
  $('stop').addEventListener('click', () => {
    if (chat.controller) chat.controller.abort();
    $('prompt').focus();
  });
  $('new-chat').addEventListener('click', () => {
    chat.history = [];
    $('log').replaceChildren();
    $('empty').hidden = false;
    $('usage').textContent = '';
    $('speed').textContent = '';
    $('prompt').focus();
  });
  setBusy(false);
  loadModel();
  refreshCache();
  // The footer follows the server's cache between replies too (other clients).
  setInterval(() => { if (!document.hidden) refreshCache(); }, 5000);
}

init();
