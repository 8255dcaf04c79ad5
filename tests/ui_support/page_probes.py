"""What the browser tests read from a Jupyter page with the dashboard, as JavaScript for page.evaluate:
one snapshot of everything the checks need, the overflow and layout probes, and WCAG contrast.
"""

# Everything the checks need, read from the page in one go. The dashboard's direct children, in order:
# title and Stop, the first live dashboard's guide line, the diagnoses banner (.kwnb-banner), the overview,
# the tabs, the curves' note, the curves, the timeline.
SNAPSHOT_JS = """() => {
  const d = document.querySelector('.jp-OutputArea .kwnb-dashboard');
  if (!d) return null;
  const [img, timeline] = d.querySelectorAll(':scope > img');
  const shown = e => !!e && e.getClientRects().length > 0 && e.offsetWidth > 0;
  const table = d.querySelector('table.kwnb-overview');
  const banner = d.querySelector(':scope > .kwnb-banner > .widget-html-content');
  const folds = [...d.querySelectorAll('.widget-toggle-button')];
  return {
    labels: [...d.querySelectorAll('.lm-TabBar-tab .lm-TabBar-tabLabel')].map(e => e.textContent),
    bars: [...d.querySelectorAll('.widget-hprogress .progress-bar')].map(e => parseFloat(e.style.width) || 0),
    logs: [...d.querySelectorAll('.widget-html-content pre')].map(e => e.textContent),
    headers: [...d.querySelectorAll('.widget-html-content')].map(e => e.textContent).filter(t => t.includes('pid')),
    title: d.querySelector('.widget-html-content').textContent,
    img: img ? {src: img.src, rendered: img.complete && img.naturalWidth > 0, width: img.naturalWidth} : null,
    stop_disabled: d.querySelector('button').disabled,
    banner: banner ? banner.textContent.trim() : '',
    overview: table ? {
      columns: [...table.querySelectorAll('th')].map(e => e.textContent),
      rows: [...table.querySelectorAll('tbody tr')].map(r => [...r.cells].map(c => c.textContent.trim())),
      rows_shown: [...table.querySelectorAll('tbody tr')].map(shown),  // drawn, not in a hidden tab
    } : null,
    folds: folds.map(e => ({text: e.textContent.trim(), shown: shown(e)})),
    // the log under the visible tab's toggle (the tab a person looks at)
    visible_log: (() => { const pre = [...d.querySelectorAll('.widget-html-content pre')].find(shown);
                          return pre ? pre.textContent : null; })(),
    timeline: timeline ? {src: timeline.src, rendered: timeline.complete && timeline.naturalWidth > 0,
                          width: timeline.naturalWidth, shown: shown(timeline), box_width: timeline.clientWidth,
                          below_curves: !shown(img) || timeline.getBoundingClientRect().top
                                                       >= img.getBoundingClientRect().bottom - 1} : null,
    // Layout probes, for what a person sees rather than what the DOM holds:
    clipped_labels: [...d.querySelectorAll('.lm-TabBar-tab .lm-TabBar-tabLabel')]
      .filter(e => e.scrollWidth > e.clientWidth + 1).map(e => e.textContent),
    log_at_bottom: (() => {  // is the newest line of the visible (chief's) log in view?
      const pre = [...d.querySelectorAll('.widget-html-content pre')].find(e => e.offsetParent);
      // Geometry, not scrollTop: the pre's last line must sit inside its scrolling box's visible area.
      for (let e = pre && pre.parentElement; e && e !== d; e = e.parentElement)
        if (e.scrollHeight > e.clientHeight + 2)
          return pre.getBoundingClientRect().bottom <= e.getBoundingClientRect().bottom + 2;
      return true; })(),
    img_box: img ? {shown: img.offsetWidth > 0 && img.offsetHeight > 0, width: img.clientWidth} : null,
    // The %%kw_worker cell's output: the dashboard once, and its static account (for pages
    // without widgets) never shown beside it, also after the run's end updated that output.
    first_output: (() => { const area = document.querySelectorAll('.jp-Cell')[1].querySelector('.jp-OutputArea');
      const node = area.querySelector('.kwnb-dashboard');  // numbered once: a new number is a new element
      if (node && !node.dataset.kwnbNode) node.dataset.kwnbNode = String(window.kwnbNodes = (window.kwnbNodes || 0) + 1);
      return {dashboards: area.querySelectorAll('.kwnb-dashboard').length, node: node ? node.dataset.kwnbNode : null,
              dashboards_in_page: document.querySelectorAll('.kwnb-dashboard').length,
              static_in_page: [...document.querySelectorAll('.kwnb-static')].filter(shown).length,
              // the account's own output box: hidden whole, not left empty under the widgets
              account_boxes: [...area.querySelectorAll('.jp-OutputArea-child')]
                .filter(c => c.querySelector('.kwnb-static') && shown(c)).length}; })(),
    answers: [...document.querySelectorAll('.jp-Cell')].slice(2, 3)
      .map(c => c.querySelector('.jp-OutputArea').textContent.trim()),
  };
}"""

# How far the overview reaches past the dashboard's right edge, unless a box of its own scrolls it
# sideways (then the box's edge counts): a table cut off or widening the page is what a person minds.
OVERVIEW_OVERFLOW_JS = """() => {
  const d = document.querySelector('.jp-OutputArea .kwnb-dashboard');
  const table = d.querySelector('table.kwnb-overview');
  let edge = table;
  for (let e = table; e && e !== d; e = e.parentElement)
    if (['auto', 'scroll'].includes(getComputedStyle(e).overflowX)) { edge = e; break; }
  return Math.round(edge.getBoundingClientRect().right - d.getBoundingClientRect().right);
}"""

# The elements reaching past the dashboard's right edge, unclipped by a scrolling box between them
# and the dashboard: what an overflow comes from.
TOO_WIDE_JS = """() => {
  const d = document.querySelector('.jp-OutputArea .kwnb-dashboard');
  const right = d.getBoundingClientRect().right;
  const clipped = e => { for (e = e.parentElement; e && e !== d; e = e.parentElement)
                           if (getComputedStyle(e).overflowX !== 'visible') return true; return false; };
  return [...d.querySelectorAll('*')].filter(e => e.getBoundingClientRect().right > right + 0.5 && !clipped(e))
    .slice(0, 6).map(e => `${e.tagName.toLowerCase()}.${[...e.classList].join('.')} `
      + (e.parentElement === d ? `(the dashboard's child ${[...d.children].indexOf(e) + 1} of ${d.children.length}) ` : '')
      + `+${(e.getBoundingClientRect().right - right).toFixed(1)} px`);
}"""

# WCAG contrast of the dashboard's texts against what is really behind them: translucent layers
# (the banner's 10 % red) composited over the first opaque ancestor.
CONTRAST_JS = """() => {
  const rgb = s => (s.match(/[\\d.]+/g) || []).map(Number);
  const lum = ([r, g, b]) => { const f = c => (c /= 255) <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4;
                               return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b); };
  const background = e => {
    const layers = [];
    for (; e; e = e.parentElement) { const c = rgb(getComputedStyle(e).backgroundColor);
      if (c.length === 3 || c[3] === 1) { layers.push(c.slice(0, 3)); break; } if (c[3] > 0) layers.push(c); }
    if (layers.length === 0 || layers[layers.length - 1].length === 4) layers.push([255, 255, 255]);
    let [r, g, b] = layers.pop();
    for (const [lr, lg, lb, a] of layers.reverse()) [r, g, b] = [lr * a + r * (1 - a), lg * a + g * (1 - a), lb * a + b * (1 - a)];
    return [r, g, b]; };
  const ratio = e => { const a = lum(rgb(getComputedStyle(e).color)), b = lum(background(e));
                       return (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05); };
  const d = document.querySelector('.jp-OutputArea .kwnb-dashboard');
  const out = {};
  const pick = {title: '.widget-html-content b', badge: '.widget-html-content span',
                tab: '.lm-TabBar-tab.lm-mod-current .lm-TabBar-tabLabel',
                other_tab: '.lm-TabBar-tab:not(.lm-mod-current) .lm-TabBar-tabLabel',
                log: '.widget-html-content pre', label: '.widget-label', note: '.widget-html-content div',
                stop: 'button', fold: '.widget-toggle-button',
                overview_head: 'table.kwnb-overview th', overview_cell: 'table.kwnb-overview td',
                overview_badge: 'table.kwnb-overview td span',
                banner: ':scope > .kwnb-banner > .widget-html-content > div'};
  for (const [name, selector] of Object.entries(pick)) {
    const e = d.querySelector(selector);
    if (e && !e.disabled) out[name] = ratio(e);  // a disabled control is exempt from contrast rules
  }
  return out;
}"""
