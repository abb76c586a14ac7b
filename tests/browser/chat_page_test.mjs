// The chat page of `rotor serve` in a real headless Chromium (puppeteer-core):
// load GET /, send a message, send one that would never end, watch it grow
// and stop it mid-way (the UI is usable again and the server
// cancels the sequence), a third turn after the stop, the page at phone width,
// and no console errors throughout.
//
//   node chat_page_test.mjs --rotor build/rotor --model models/stories260K.gguf
//
// Exit 0 passes, 1 fails, 77 skips (ctest SKIP_RETURN_CODE): no Chromium, or
// no puppeteer-core (`npm ci` in tests/browser, which `make deps` runs).
import {spawn} from 'node:child_process';
import {existsSync} from 'node:fs';
import {dirname, join} from 'node:path';
import {fileURLToPath} from 'node:url';

const SKIP = 77;
const TIMEOUT_MS = 90_000;

function arg(name) {
  const i = process.argv.indexOf(`--${name}`);
  return i > 0 ? process.argv[i + 1] : undefined;
}

function skip(why) {
  console.log(`SKIP: ${why}`);
  process.exit(SKIP);
}

let failures = 0;
function check(ok, what, detail = '') {
  console.log(`${ok ? 'ok' : 'FAIL'}: ${what}${detail ? ` (${detail})` : ''}`);
  if (!ok) failures += 1;
  return ok;
}

const rotor = arg('rotor');
const model = arg('model');
if (!rotor || !model) {
  console.error('usage: chat_page_test.mjs --rotor BIN --model FILE');
  process.exit(1);
}

const chromium = [process.env.CHROMIUM, '/usr/bin/chromium', '/usr/bin/chromium-browser',
                  '/usr/bin/google-chrome'].find((p) => p && existsSync(p));
if (!chromium) skip('no Chromium found (Debian package chromium, or set CHROMIUM=path)');
let puppeteer;
try {
  puppeteer = (await import('puppeteer-core')).default;
} catch (e) {
  const here = dirname(fileURLToPath(import.meta.url));
  skip(`puppeteer-core is not installed: run \`npm ci\` in ${here} (make deps does) [${e.message}]`);
}


// rotor serve on a free port: the port is read from its "listening on" line.
function startServer() {
  const child = spawn(rotor, ['serve', '-m', model, '--host', '127.0.0.1', '--port', '0'],
                      {stdio: ['ignore', 'pipe', 'pipe']});
  let log = '';
  const port = new Promise((resolve, reject) => {
    const onData = (d) => {
      log += d;
      const m = log.match(/listening on http:\/\/127\.0\.0\.1:(\d+)/);
      if (m) resolve(Number(m[1]));
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    child.on('exit', (code) => reject(new Error(`rotor serve exited (${code}): ${log}`)));
    child.on('error', (e) => reject(new Error(`cannot run ${rotor}: ${e.message}`)));
  });
  return {child, port, log: () => log};
}

async function waitHealthy(base) {
  for (let i = 0; i < 200; ++i) {
    try {
      if ((await fetch(`${base}/health`)).ok) return;
    } catch (e) { /* not listening yet */ }
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error('rotor serve never became healthy');
}

async function metric(base, name) {
  const text = await (await fetch(`${base}/metrics`)).text();
  const m = text.match(new RegExp(`^${name} ([0-9.eE+-]+)$`, 'm'));
  return m ? Number(m[1]) : NaN;
}

async function until(what, fn, ms = 10_000) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

const server = startServer();
let browser;
// puppeteer kills its browser when this process exits; the server is ours.
const watchdog = setTimeout(() => {
  console.error(`FAIL: the test took more than ${TIMEOUT_MS / 1000} s\n${server.log()}`);
  server.child.kill('SIGKILL');
  process.exit(1);
}, TIMEOUT_MS);
try {
  const port = await server.port;
  const base = `http://127.0.0.1:${port}`;
  await waitHealthy(base);

  // The files themselves, as a client other than the page sees them.
  for (const [path, type] of [['/', 'text/html'], ['/chat.js', 'text/javascript'],
                              ['/chat.css', 'text/css']]) {
    const r = await fetch(base + path);
    const body = await r.text();
    check(r.status === 200 && (r.headers.get('content-type') || '').startsWith(type) &&
              body.length > 100,
          `GET ${path} is ${type}`, `${r.status} ${r.headers.get('content-type')}`);
  }

  browser = await puppeteer.launch({
    executablePath: chromium,
    headless: true,
    // Chromium's start can pass puppeteer's default 30 s on a loaded 2-core
    // machine (it did once beside the ASan suite's other tests); the
    // watchdog above still bounds the whole test.
    timeout: 75_000,
    // root in a container has no user namespaces for the sandbox.
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
  });
  const page = await browser.newPage();
  const errors = [];
  let expect400 = false;  // Chromium logs the 400 of step 4 itself
  page.on('console', (m) => {
    if (m.type() !== 'error') return;
    if (expect400 && m.text().includes('status of 400')) return;
    errors.push(`console: ${m.text()}`);
  });
  page.on('pageerror', (e) => errors.push(`page error: ${e.message}`));
  page.on('requestfailed', (r) => {
    // The stopped request is aborted on purpose.
    if (!r.url().endsWith('/v1/chat/completions')) errors.push(`request failed: ${r.url()}`);
  });
  await page.setViewport({width: 1200, height: 800});
  await page.goto(`${base}/`, {waitUntil: 'load'});
  const title = await page.title();
  check(title === 'rotor chat', 'the page loads', title);
  const modelLine = await until('the model line', () =>
      page.$eval('#model', (e) => (e.textContent.includes('context') ? e.textContent : '')));
  check(modelLine.includes('stories260K'), 'the header names the model', modelLine);

  // Records every length the last reply's text goes through.
  await page.evaluate(() => {
    window.lengths = [];
    new MutationObserver(() => {
      const t = document.querySelectorAll('.msg.assistant .text');
      if (t.length) window.lengths.push(t[t.length - 1].textContent.length);
    }).observe(document.getElementById('log'), {subtree: true, childList: true,
                                                 characterData: true});
  });
  const setField = (id, value) => page.$eval(`#${id}`, (e, v) => {
    e.value = v;
    e.dispatchEvent(new Event('change', {bubbles: true}));
  }, value);
  const replies = () => page.$$eval('.msg.assistant', (els) => els.map((e) => ({
    text: e.querySelector('.text').textContent,
    finish: e.dataset.finish,
    error: e.classList.contains('error'),
    note: [...e.querySelectorAll('.note')].map((n) => n.textContent).join(' | '),
  })));
  const idle = () => page.$eval('#stop', (s) => s.disabled && !document.getElementById('send').disabled);
  const sendMessage = async (text) => {
    await page.click('#prompt');
    await page.keyboard.type(text);
    await page.keyboard.press('Enter');
  };

  // 1. A short reply, streamed.
  await setField('max_tokens', '120');
  await setField('seed', '7');
  await page.click('#ignore_eos');
  await sendMessage('Once upon a time');
  await until('the first reply to end', async () => (await replies())[0]?.finish, 20_000);
  let [first] = await replies();
  check(!first.error && first.finish === 'length' && first.text.length > 20,
        'the first reply arrives whole', JSON.stringify(first));
  const footer = await page.$eval('.status', (e) => e.textContent.replace(/\s+/g, ' ').trim());
  check(/tokens\/s/.test(footer), 'the footer shows tokens/s', footer);
  check(/prompt \d+ tokens \(\d+ from the prefix cache\)/.test(footer),
        'the footer shows usage and prefix cache hits', footer);
  check(/KV blocks: \d+ used/.test(footer), 'the footer shows KV use', footer);

  // 2. A reply that would not end (sink keeps generating past the context):
  //    stopped mid-way.
  await setField('max_tokens', '1000000');
  await page.select('#kv', 'sink');
  await setField('kv_size', '64');
  await page.select('#kv_positions', 'compact');
  const cancelledBefore = await metric(base, 'rotor_requests_cancelled_total');
  await page.evaluate(() => { window.lengths = []; });
  await sendMessage('Tell me more');
  // The bundled model can write a short reply within one frame; this one
  // streams for as long as it is let, so it must be seen at several lengths.
  const growth = () => page.evaluate(() => new Set(window.lengths.filter((n) => n > 0)).size);
  const grew = await until('the second reply to grow', async () =>
      ((await replies())[1]?.text.length ?? 0) > 300 && (await growth()) >= 5, 20_000)
      .then(() => true, () => false);
  check(grew, 'the reply grows as it streams', `${await growth()} distinct lengths`);
  check(await page.$eval('#stop', (s) => !s.disabled), 'stop is enabled while streaming');
  check(await page.$eval('#send', (s) => s.disabled), 'send is disabled while streaming');
  await page.click('#stop');
  await until('the UI to be idle after stop', idle, 5_000);
  const stopped = (await replies())[1];
  check(stopped.finish === 'stopped' && !stopped.error, 'the stopped reply is marked stopped',
        stopped.note);
  await new Promise((r) => setTimeout(r, 300));
  check((await replies())[1].text === stopped.text, 'the stopped reply no longer grows');
  const cancelled = await until('the server to cancel the sequence', async () =>
      (await metric(base, 'rotor_requests_cancelled_total')) > cancelledBefore, 5_000)
      .then(() => true, () => false);
  check(cancelled, 'the server cancels the sequence when the page stops');
  check(await until('no running sequence', async () =>
            (await metric(base, 'rotor_running_sequences')) === 0, 5_000).then(() => true, () => false),
        'no sequence is left running');

  // 3. The conversation goes on after the stop.
  await setField('max_tokens', '16');
  await sendMessage('The end');
  await until('the third reply to end', async () => (await replies())[2]?.finish, 20_000);
  const third = (await replies())[2];
  check(!third.error && third.finish === 'length' && third.text.length > 0,
        'a message after the stop gets its reply', JSON.stringify(third));
  check(await page.$$eval('.msg.user', (e) => e.length) === 3, 'three user messages are shown');

  // 4. A request the server refuses: its message is shown, the UI stays usable.
  expect400 = true;
  await setField('kv_size', '999999999');
  await sendMessage('Too big');
  await until('the refused reply to end', async () => (await replies())[3]?.finish, 10_000);
  const refused = (await replies())[3];
  check(refused.error && refused.finish === 'error' && /kv_size/.test(refused.note),
        'a refused request shows the server\'s message', refused.note);
  check(await idle(), 'the UI is usable after an error');
  expect400 = false;
  await setField('kv_size', '64');

  // 5. A phone's width: nothing wider than the screen, every control labelled,
  //    the composer reachable.
  await page.setViewport({width: 375, height: 740, isMobile: true, hasTouch: true});
  await page.reload({waitUntil: 'load'});
  const phone = await page.evaluate(() => {
    const unlabelled = [...document.querySelectorAll('input, select, textarea')]
                           .filter((e) => e.labels.length === 0).map((e) => e.id);
    const send = document.getElementById('send').getBoundingClientRect();
    return {scrollWidth: document.documentElement.scrollWidth, unlabelled,
            sendVisible: send.width > 0 && send.right <= window.innerWidth,
            settingsOpen: document.getElementById('settings-box').open,
            width: window.innerWidth};
  });
  check(phone.scrollWidth <= 375, 'no horizontal scrolling at 375 px', `${phone.scrollWidth} px`);
  check(phone.unlabelled.length === 0, 'every control has a label', phone.unlabelled.join(','));
  check(phone.sendVisible, 'the send button fits the screen');
  check(!phone.settingsOpen, 'settings start folded on a phone', `${phone.width} px`);
  await sendMessage('Hello');
  await until('the phone reply to end', async () => (await replies())[0]?.finish, 20_000);
  check(!(await replies())[0].error, 'a message sent at phone width gets its reply');

  check(errors.length === 0, 'no console errors', errors.join('; '));
} catch (e) {
  check(false, 'the test ran to its end', e.stack || String(e));
  console.log(server.log());
} finally {
  if (browser) await browser.close();
  server.child.kill('SIGTERM');
  clearTimeout(watchdog);
}
console.log(failures ? `${failures} check(s) failed` : 'all checks passed');
process.exit(failures ? 1 : 0);
