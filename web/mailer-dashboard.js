/*
 * mailer dashboard: polls the HTTP worker's JSON API once a second and draws
 * every job's state, topology and last ten minutes.
 *
 * Own code, no library: the page must work offline and under
 * "Content-Security-Policy: default-src 'self'", so nothing is inline, styles
 * are switched by class only, and SVG attributes are set with setAttribute.
 * Texts that come from the server (job names, labels, error texts) are only
 * ever assigned with textContent: an error text may quote anything.
 */
'use strict';

(function () {
	const POLL_MS = 1000;
	const MAX_DETAIL_POLLS = 20;	/* detail requests per poll, at most */
	const SVG_NS = 'http://www.w3.org/2000/svg';

	const jobsBox = document.getElementById('jobs');
	const banner = document.getElementById('banner');
	const noJobs = document.getElementById('no-jobs');
	const updatedAt = document.getElementById('updated-at');

	const views = new Map();	/* job name -> its DOM parts */
	let detailOffset = 0;		/* rotates the detail polls when there are many jobs */
	let svgIds = 0;				/* unique ids for each diagram's arrow marker */

	/* ---- talking to the API ---- */

	/*
	 * The token is read from the URL fragment at each request (the browser
	 * never sends a fragment to the server, and nothing here stores it), so
	 * editing "#token=" in the address bar takes effect without a reload.
	 */
	function authHeaders() {
		const token = new URLSearchParams(location.hash.replace(/^#/, '')).get('token');
		return token ? { Authorization: 'Bearer ' + token } : {};
	}

	/* Relative URLs, so the page also works behind a proxy under a path prefix. */
	async function getJson(path) {
		let resp;
		try {
			resp = await fetch(path, { headers: authHeaders(), cache: 'no-store' });
		} catch (e) {
			throw { status: 0, detail: 'cannot reach the server' };
		}
		if (!resp.ok) {
			let detail = '';
			try {
				detail = (await resp.json()).error || '';
			} catch (e) {
				/* not JSON (e.g. a proxy's page): the status says enough */
			}
			throw { status: resp.status, detail: detail };
		}
		return resp.json();
	}

	function failureText(err) {
		if (err.status === 401)
			return authHeaders().Authorization
				? 'token rejected (HTTP 401): check #token= in the address'
				: 'token required (HTTP 401): open this page as ...#token=<mailer.http_token>';
		if (!err.status)
			return 'API unreachable: ' + (err.detail || String(err));
		return 'API error (HTTP ' + err.status + ')' + (err.detail ? ': ' + err.detail : '');
	}

	function showBanner(text) {
		banner.textContent = text || '';
		banner.hidden = !text;
	}

	/* ---- small DOM helpers ---- */

	function el(tag, cls, text) {
		const e = document.createElement(tag);
		if (cls)
			e.className = cls;
		if (text !== undefined)
			e.textContent = text;
		return e;
	}

	function svgEl(tag, attrs, cls) {
		const e = document.createElementNS(SVG_NS, tag);
		for (const k in attrs)
			e.setAttribute(k, attrs[k]);
		if (cls)
			e.setAttribute('class', cls);
		return e;
	}

	function isNum(v) {
		return typeof v === 'number' && isFinite(v);
	}

	function fmtCount(v) {
		return isNum(v) ? v.toLocaleString('en-US') : '–';
	}

	/* Short numbers for chart axes and captions: 1234567 -> "1.23M". */
	function fmtShort(v) {
		if (!isNum(v))
			return '–';
		const a = Math.abs(v);
		if (a >= 1e9) return (v / 1e9).toPrecision(3) + 'G';
		if (a >= 1e6) return (v / 1e6).toPrecision(3) + 'M';
		if (a >= 1e4) return (v / 1e3).toPrecision(3) + 'k';
		if (a >= 100 || Number.isInteger(v)) return String(Math.round(v));
		return String(parseFloat(v.toPrecision(2)));
	}

	/* A delay in the largest unit that keeps it readable: "4.7 s", "12 min", "700 d". */
	function fmtSeconds(v) {
		if (!isNum(v))
			return '–';
		if (Math.abs(v) < 100)
			return v.toFixed(1) + ' s';
		if (Math.abs(v) < 6000)
			return Math.round(v / 60) + ' min';
		if (Math.abs(v) < 172800)
			return (v / 3600).toFixed(1) + ' h';
		return Math.round(v / 86400) + ' d';
	}

	function fmtBytes(v) {
		if (!isNum(v))
			return '–';
		const units = ['B', 'kB', 'MB', 'GB', 'TB'];
		let i = 0;
		while (v >= 1024 && i < units.length - 1) {
			v /= 1024;
			i++;
		}
		return (i ? v.toFixed(1) : String(v)) + ' ' + units[i];
	}

	/* ---- one job's card ---- */

	/* The facts line: [caption, class of the value, how to render it]. */
	const FACTS = [
		['records in', 'counter-records-in', j => (isNum(j.metrics.records_in) ? String(j.metrics.records_in) : '–')],
		['out', 'counter-records-out', j => fmtCount(j.metrics.records_out)],
		['dead letters', 'dead-letters', j => fmtCount(j.metrics.records_dead_lettered)],
		['late', 'counter-late', j => fmtCount(j.metrics.records_late)],
		['restarts', 'restarts', j => fmtCount(j.restarts)],
		['input/s', 'input-rate', j => fmtShort(j.metrics.input_rate)],
		['lag', 'consumer-lag', j => fmtCount(j.metrics.consumer_lag)],
		['watermark delay', 'watermark-delay', j => fmtSeconds(j.metrics.watermark_delay_seconds)],
		['last checkpoint', 'last-checkpoint', j => (isNum(j.metrics.last_checkpoint_ms) ? '#' + j.metrics.last_checkpoint_epoch + ', ' + j.metrics.last_checkpoint_ms + ' ms' : '–')],
		['state', 'state-bytes', j => fmtBytes(j.metrics.state_bytes)],
		['subtasks', 'parallelism', j => fmtCount(j.parallelism)],
	];

	/* The charts: a title and series drawn from the history arrays. */
	const CHARTS = [
		{ title: 'records / s', series: [
			{ name: 'in', cls: 'in', values: h => perSecond(h.at, h.records_in) },
			{ name: 'out', cls: 'out', values: h => perSecond(h.at, h.records_out) },
			{ name: 'dead', cls: 'dead', values: h => perSecond(h.at, h.records_dead_lettered) }] },
		{ title: 'consumer lag (records)', series: [{ cls: 'lag', values: h => h.consumer_lag }] },
		{ title: 'watermark delay (s)', series: [{ cls: 'delay', values: h => h.watermark_delay_seconds }] },
		{ title: 'checkpoint duration (ms)', series: [{ cls: 'ckpt', values: h => h.last_checkpoint_ms }] },
		{ title: 'restarts', series: [{ cls: 'restarts', values: h => h.restarts }] },
	];

	function createView(name) {
		const root = el('section', 'job');
		root.dataset.job = name;

		const head = el('header', 'job-head');
		head.append(el('h2', 'job-name', name));
		const state = el('span', 'job-state');
		const waiting = el('span', 'job-waiting');
		head.append(state, waiting);

		const facts = el('ul', 'facts');
		const factValues = FACTS.map(([caption, cls]) => {
			const li = el('li');
			const value = el('span', 'fact-value ' + cls);
			li.append(el('span', 'fact-name', caption), value);
			facts.append(li);
			return value;
		});

		/* .last-error holds the error text alone, its time beside it */
		const errorLine = el('p', 'error-line none');
		const lastErrorAt = el('span', 'last-error-at');
		const lastError = el('span', 'last-error');
		errorLine.append(lastErrorAt, lastError);

		const topology = svgEl('svg', { role: 'img', 'aria-label': 'topology of ' + name }, 'topology');

		const charts = el('div', 'charts');
		const chartViews = CHARTS.map(def => {
			const fig = el('figure', 'chart');
			const cap = el('figcaption');
			const now = el('span', 'chart-now');
			cap.append(el('span', 'chart-title', def.title), now);
			const svg = svgEl('svg', { viewBox: '0 0 300 110', preserveAspectRatio: 'none' });
			fig.append(cap, svg);
			charts.append(fig);
			return { def: def, svg: svg, now: now };
		});

		/* folded away: the plan, and the partitions and subtasks as tables */
		const more = el('details', 'more');
		const planText = el('pre', 'plan');
		const partitions = el('table', 'partitions');
		const subtasks = el('table', 'subtasks');
		more.append(el('summary', undefined, 'plan, partitions, subtasks'), planText, partitions, subtasks);

		root.append(head, facts, errorLine, topology, charts, more);
		return { root, state, waiting, factValues, errorLine, lastErrorAt, lastError, topology, topologyKey: null,
			chartViews, planText, partitions, subtasks, markerId: 'arrow-' + (++svgIds) };
	}

	/* What /api/jobs says (every job, every poll). */
	function renderSummary(view, job) {
		const state = job.state || 'unknown';
		view.state.textContent = state;
		/* a class name only from the known alphabet of states */
		view.state.className = 'job-state state-' + state.replace(/[^a-z_]/g, '');
		view.waiting.textContent = job.waiting_for ? 'waiting for ' + job.waiting_for : '';

		FACTS.forEach(([, , render], i) => {
			view.factValues[i].textContent = render({ ...job, metrics: job.metrics || {} });
		});
		const dead = (job.metrics || {}).records_dead_lettered;
		view.root.querySelector('.dead-letters').classList.toggle('nonzero', isNum(dead) && dead > 0);

		view.lastError.textContent = job.last_error || '';
		view.lastErrorAt.textContent = job.last_error && job.last_error_at ? job.last_error_at : '';
		view.errorLine.classList.toggle('none', !job.last_error);
	}

	/* What /api/jobs/<name> adds: the topology, the history charts, the plan. */
	function renderDetail(view, detail, serverNow) {
		renderTopology(view, Array.isArray(detail.topology) ? detail.topology : []);
		const h = detail.history;
		view.chartViews.forEach(cv => drawChart(cv, h && Array.isArray(h.at) ? h : null, serverNow));
		if (view.planText.textContent !== (detail.plan || ''))
			view.planText.textContent = detail.plan || '';
		renderTable(view.partitions, PARTITION_COLUMNS, detail.partitions);
		renderTable(view.subtasks, SUBTASK_COLUMNS, detail.subtasks);
	}

	/* [heading, field, how to render it] for the detail tables. */
	const PARTITION_COLUMNS = [['subtask', 'subtask', fmtCount], ['topic', 'topic', String],
		['partition', 'partition', String], ['position', 'position', fmtCount], ['end offset', 'end_offset', fmtCount],
		['lag', 'lag', fmtCount], ['records in', 'records_in', fmtCount], ['watermark', 'watermark', String],
		['idle', 'idle', v => (v ? 'idle' : '')], ['ahead', 'ahead', v => (v ? 'paused' : '')],
		['offsets skipped', 'offsets_skipped', fmtCount]];
	const SUBTASK_COLUMNS = [['subtask', 'subtask', fmtCount], ['pid', 'pid', String], ['state', 'state', String],
		['records in', 'records_in', fmtCount], ['records out', 'records_out', fmtCount],
		['last error', 'last_error', String]];

	/* A table rebuilt from rows of objects (few rows: a job's partitions); hidden when empty. */
	function renderTable(table, columns, rows) {
		rows = Array.isArray(rows) ? rows : [];
		table.hidden = rows.length === 0;
		table.replaceChildren();
		if (!rows.length)
			return;
		const head = el('tr');
		for (const [heading] of columns)
			head.append(el('th', undefined, heading));
		table.append(head);
		for (const row of rows) {
			const tr = el('tr');
			for (const [, field, render] of columns)
				tr.append(el('td', undefined, row[field] === null || row[field] === undefined ? '' : render(row[field])));
			table.append(tr);
		}
	}

	/* ---- topology diagram ---- */

	const BOX_W = 196, BOX_H = 78, GAP = 30, PAD = 4;
	const LABEL_CHARS = 32;	/* what fits a box at the label's font size */

	function shorten(text, max) {
		text = text || '';
		return text.length > max ? text.slice(0, max - 1) + '…' : text;
	}

	function stageCounts(s) {
		return 'in ' + fmtShort(s.in) + '  →  out ' + fmtShort(s.out);
	}

	function stageExtra(s) {
		const parts = [];
		if (isNum(s.dropped) && s.dropped > 0)
			parts.push('dropped ' + fmtShort(s.dropped));
		if (isNum(s.late))
			parts.push('late ' + fmtShort(s.late));
		return parts.join(', ');
	}

	/*
	 * The boxes are rebuilt only when the stages change (a restarted job
	 * may have a new plan); otherwise only the counter texts are updated,
	 * so the diagram does not flicker.
	 */
	function renderTopology(view, stages) {
		const svg = view.topology;
		const key = JSON.stringify(stages.map(s => [s.stage, s.label]));
		if (key !== view.topologyKey) {
			view.topologyKey = key;
			svg.replaceChildren();
			const width = Math.max(1, stages.length * BOX_W + (stages.length - 1) * GAP + 2 * PAD);
			const height = BOX_H + 2 * PAD;
			svg.setAttribute('viewBox', '0 0 ' + width + ' ' + height);
			svg.setAttribute('width', width);
			svg.setAttribute('height', height);

			const marker = svgEl('marker', { id: view.markerId, viewBox: '0 0 10 10', refX: 9, refY: 5,
				markerWidth: 7, markerHeight: 7, orient: 'auto' });
			marker.append(svgEl('path', { d: 'M0,0 L10,5 L0,10 z' }, 'arrow-head'));
			const defs = svgEl('defs');
			defs.append(marker);
			svg.append(defs);

			stages.forEach((s, i) => {
				const x = PAD + i * (BOX_W + GAP);
				const g = svgEl('g', { transform: 'translate(' + x + ',' + PAD + ')' }, 'stage');
				g.dataset.stage = s.stage;
				const title = svgEl('title');
				title.textContent = s.stage + ': ' + (s.label || '');
				g.append(title, svgEl('rect', { width: BOX_W, height: BOX_H, rx: 6 }, 'box'));
				const lines = [['stage-name', 20, s.stage], ['stage-label', 37, shorten(s.label, LABEL_CHARS)],
					['stage-counts', 56, ''], ['stage-extra', 71, '']];
				for (const [cls, y, text] of lines) {
					const t = svgEl('text', { x: 10, y: y }, cls);
					t.textContent = text;
					g.append(t);
				}
				svg.append(g);
				if (i > 0)
					svg.append(svgEl('line', { x1: x - GAP, y1: PAD + BOX_H / 2, x2: x - 2, y2: PAD + BOX_H / 2,
						'marker-end': 'url(#' + view.markerId + ')' }, 'arrow'));
			});
		}
		const groups = svg.querySelectorAll('.stage');
		stages.forEach((s, i) => {
			groups[i].querySelector('.stage-counts').textContent = stageCounts(s);
			groups[i].querySelector('.stage-extra').textContent = stageExtra(s);
		});
	}

	/* ---- charts ---- */

	const CW = 300, CH = 110, ML = 38, MR = 6, MT = 8, MB = 16;
	const MIN_SPAN = 60;	/* seconds: a new job's few samples do not fill the width */
	const MAX_SPAN = 600;	/* seconds: the server keeps ten minutes */
	const MAX_GAP = 3;		/* seconds between samples beyond which the line breaks */

	/*
	 * Per-second rates from cumulative counters. A decrease (a counter reset)
	 * or a missing value gives a gap, not a negative spike.
	 */
	function perSecond(at, cum) {
		if (!Array.isArray(cum))
			return [];
		return cum.map((v, i) => {
			if (i === 0 || !isNum(v) || !isNum(cum[i - 1]) || !(at[i] > at[i - 1]) || v < cum[i - 1])
				return null;
			return (v - cum[i - 1]) / (at[i] - at[i - 1]);
		});
	}

	/* A round upper bound for the y axis: 1, 2 or 5 times a power of ten. */
	function niceMax(v) {
		if (!(v > 0))
			return 1;
		const p = Math.pow(10, Math.floor(Math.log10(v)));
		for (const m of [1, 2, 5, 10])
			if (v <= m * p)
				return m * p;
		return 10 * p;
	}

	function drawChart(cv, h, serverNow) {
		const svg = cv.svg;
		svg.replaceChildren();
		const at = h ? h.at : [];
		const series = cv.def.series.map(s => ({ s: s, v: h ? (s.values(h) || []) : [] }));
		const n = at.length;
		if (n === 0) {
			const t = svgEl('text', { x: CW / 2, y: CH / 2, 'text-anchor': 'middle' }, 'no-data');
			t.textContent = 'no data yet';
			svg.append(t);
			cv.now.textContent = '';
			return;
		}
		/* the right edge is the server's now: a stopped job's samples drift left */
		const tEnd = Math.max(at[n - 1], serverNow || 0);
		const tStart = Math.max(Math.min(at[0], tEnd - MIN_SPAN), tEnd - MAX_SPAN);
		const shown = i => at[i] >= tStart && isNum(at[i]);
		let max = 0;
		for (const { v } of series)
			v.forEach((y, i) => {
				if (shown(i) && isNum(y) && y > max)
					max = y;
			});
		const yMax = niceMax(max);
		const px = t => ML + (t - tStart) / (tEnd - tStart) * (CW - ML - MR);
		const py = y => MT + (1 - y / yMax) * (CH - MT - MB);

		/* grid lines at 0, half and the top, labelled */
		for (const y of [0, yMax / 2, yMax]) {
			svg.append(svgEl('line', { x1: ML, x2: CW - MR, y1: py(y), y2: py(y) }, 'grid'));
			const t = svgEl('text', { x: ML - 4, y: py(y) + 3, 'text-anchor': 'end' }, 'axis-label');
			t.textContent = fmtShort(y);
			svg.append(t);
		}
		const left = svgEl('text', { x: ML, y: CH - 3 }, 'axis-label');
		left.textContent = '−' + Math.round(tEnd - tStart) + ' s';
		const right = svgEl('text', { x: CW - MR, y: CH - 3, 'text-anchor': 'end' }, 'axis-label');
		right.textContent = 'now';
		svg.append(left, right);

		if (max === 0 && !series.some(({ v }) => v.some((y, i) => shown(i) && isNum(y)))) {
			const t = svgEl('text', { x: (ML + CW - MR) / 2, y: CH / 2, 'text-anchor': 'middle' }, 'no-data');
			t.textContent = 'none';
			svg.append(t);
		}

		/* one path per series; a null or a gap of samples breaks the line */
		for (const { s, v } of series) {
			let d = '';
			let pen = false;
			for (let i = 0; i < n; i++) {
				if (i > 0 && at[i] - at[i - 1] > MAX_GAP)
					pen = false;
				if (!shown(i) || !isNum(v[i])) {
					pen = false;
					continue;
				}
				d += (pen ? 'L' : 'M') + px(at[i]).toFixed(1) + ',' + py(v[i]).toFixed(1);
				pen = true;
			}
			if (d)
				svg.append(svgEl('path', { d: d }, 'series series-' + s.cls));
		}

		/* the caption: each series' latest value, none once the samples stopped (a stopped job) */
		const current = at[n - 1] >= tEnd - MAX_GAP;
		cv.now.replaceChildren();
		for (const { s, v } of series) {
			const last = current && v.length ? v[v.length - 1] : null;
			const span = el('span', s.name ? 'key-' + s.cls : '', (s.name ? s.name + ' ' : '') + fmtShort(last) + ' ');
			cv.now.append(span);
		}
	}

	/* ---- the poll loop ---- */

	/* ISO 8601 to unix seconds; also takes PostgreSQL's "+01" offsets, which Date.parse refuses. */
	function parseTime(text) {
		if (typeof text !== 'string')
			return null;
		const ms = Date.parse(text.replace(' ', 'T').replace(/([+-]\d\d)$/, '$1:00'));
		return isNum(ms) ? ms / 1000 : null;
	}

	/* Keep the cards in the API's order, adding and removing as jobs come and go. */
	function syncJobList(jobs) {
		const seen = new Set();
		jobs.forEach((job, i) => {
			seen.add(job.name);
			let view = views.get(job.name);
			if (!view) {
				view = createView(job.name);
				views.set(job.name, view);
			}
			if (jobsBox.children[i] !== view.root)
				jobsBox.insertBefore(view.root, jobsBox.children[i] || null);
			renderSummary(view, job);
		});
		for (const [name, view] of views)
			if (!seen.has(name)) {
				view.root.remove();
				views.delete(name);
			}
		noJobs.hidden = jobs.length > 0;
	}

	/* Details for up to MAX_DETAIL_POLLS jobs, rotating through them when there are more. */
	async function pollDetails(jobs, serverNow) {
		let picked = jobs;
		if (jobs.length > MAX_DETAIL_POLLS) {
			detailOffset %= jobs.length;
			picked = jobs.concat(jobs).slice(detailOffset, detailOffset + MAX_DETAIL_POLLS);
			detailOffset += MAX_DETAIL_POLLS;
		}
		const results = await Promise.allSettled(picked.map(job =>
			getJson('api/jobs/' + encodeURIComponent(job.name)).then(detail => {
				const view = views.get(job.name);
				if (view)
					renderDetail(view, detail, serverNow);
			})));
		/*
		 * A 404 is a job dropped since the list was read: the next list
		 * removes it. (Jobs named "." or ".." have no detail either: a
		 * browser folds those path segments away.)
		 */
		const failed = results.find(r => r.status === 'rejected' && !(r.reason && r.reason.status === 404));
		if (failed)
			throw failed.reason;
	}

	async function poll() {
		const started = Date.now();
		try {
			const list = await getJson('api/jobs');
			const jobs = Array.isArray(list.jobs) ? list.jobs : [];
			syncJobList(jobs);
			/* unix seconds on the server's clock, whatever the browser's says */
			const serverNow = parseTime(list.generated_at);
			await pollDetails(jobs, serverNow);
			showBanner('');
			document.body.classList.remove('stale');
			const now = new Date();
			updatedAt.textContent = now.toLocaleTimeString();
			updatedAt.setAttribute('datetime', now.toISOString());
		} catch (err) {
			/* keep the last data on screen, say it is stale */
			const fromApi = err !== null && typeof err === 'object' && 'status' in err;
			showBanner(fromApi ? failureText(err) : 'page error: ' + err);
			document.body.classList.add('stale');
		}
		/* setTimeout rather than setInterval: a slow answer never stacks requests */
		setTimeout(poll, Math.max(0, POLL_MS - (Date.now() - started)));
	}

	poll();
})();
