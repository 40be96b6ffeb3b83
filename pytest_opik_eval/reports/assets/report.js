// The HTML report's script (reports/html.py inlines it). Rows are built from the embedded JSON
// with textContent only (never innerHTML), so item text is shown as text, whatever it contains.
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("report-data").textContent);
  var failuresOnly = document.getElementById("failures-only");
  var search = document.getElementById("item-search");
  var sections = document.querySelectorAll("section.experiment");

  function el(tag, className, text) {
    var node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }
  function num(value) {
    return typeof value === "number" ? value.toFixed(3) : value == null ? "-" : String(value);
  }
  function signed(value) {
    return typeof value === "number" ? (value >= 0 ? "+" : "") + value.toFixed(3) : "-";
  }
  function shown(value) {
    if (value === undefined) return "(not given)";
    return typeof value === "string" ? value : JSON.stringify(value, null, 2);
  }
  function field(title, value) {
    var box = el("div", "field");
    box.appendChild(el("h4", "", title));
    box.appendChild(el("pre", "", shown(value)));
    return box;
  }

  function duration(seconds) {
    if (seconds < 1) return Math.round(seconds * 1000) + " ms";
    return seconds < 100 ? seconds.toFixed(1) + " s" : Math.round(seconds).toLocaleString("en-US") + " s";
  }
  function tokens(input, output) {
    return input.toLocaleString("en-US") + " in / " + output.toLocaleString("en-US") + " out tokens";
  }

  // A trial's spans, as embedded depth first with their depth (reports/html.py, _span_tree):
  // each a <details> whose summary says what it is, how long it took, its tokens and cost, and
  // which opens on its input, output, error, and the spans under it.
  function spanTree(t) {
    var tree = el("details", "span-tree");
    var title = "Spans (" + t.spans.length + ")";
    tree.appendChild(el("summary", "", t.trace ? title + " \u00b7 trace " + t.trace : title));
    var parents = [tree];
    t.spans.forEach(function (s) {
      var node = el("details", "span");
      node.dataset.name = s.n;
      node.dataset.type = s.t;
      var head = el("summary");
      head.appendChild(el("span", "span-name", s.n));
      head.appendChild(el("span", "span-type", s.t));
      if (typeof s.s === "number") head.appendChild(el("span", "span-latency", duration(s.s)));
      if (s.m) head.appendChild(el("span", "span-model", s.m));
      if (s.u) head.appendChild(el("span", "span-tokens", tokens(s.u[0], s.u[1])));
      // Costs arrive written, as every report writes them (html.py, formatting.dollars).
      if (s.c) head.appendChild(el("span", "span-cost", s.c));
      else if (s.x) head.appendChild(el("span", "span-cost unpriced", "cost unknown: " + s.x));
      if (s.e) head.appendChild(el("span", "badge bad span-error", "error"));
      // Spaces between the parts, so that they read (and copy) as words, not only look apart.
      Array.prototype.slice.call(head.children, 1).forEach(function (part) {
        head.insertBefore(document.createTextNode(" "), part);
      });
      node.appendChild(head);
      if ("i" in s) node.appendChild(field("Input", s.i));
      if ("o" in s) node.appendChild(field("Output", s.o));
      if (s.e) node.appendChild(field("Error", s.e));
      // A span's parent is the last span one level up; a depth that skips levels (never made
      // by _span_tree) falls back to the deepest parent there is.
      parents.length = Math.min(s.d + 1, parents.length);
      parents[parents.length - 1].appendChild(node);
      parents.push(node);
    });
    return tree;
  }

  function means(item, metrics) {
    return metrics.map(function (metric) {
      var sum = 0, n = 0;
      item.trials.forEach(function (t) {
        t.scores.forEach(function (s) {
          // s is [name, value, reason, scoring failed]; NaN and Infinity arrive as strings.
          if (s[0] === metric && !s[3] && typeof s[1] === "number") { sum += s[1]; n++; }
        });
      });
      return n ? num(sum / n) : "-";
    });
  }

  function renderRows(experiment, tbody) {
    var rows = document.createDocumentFragment();
    experiment.items.forEach(function (item, index) {
      var row = el("tr", "item-row");
      row.dataset.verdict = item.verdict;
      row.dataset.itemId = item.id;
      row.dataset.index = index;
      row.tabIndex = 0;
      row.setAttribute("aria-expanded", "false");
      var raw = item.data ? item.data.input : undefined;
      var input = raw === undefined ? "" : typeof raw === "string" ? raw : JSON.stringify(raw);
      // Lower-cased once here, so that filtering 10,000 rows per keystroke only compares strings.
      row.searchText = (item.id + "\n" + input).toLowerCase();
      var cells = [item.id, item.verdict, item.passed + " / " + item.trials.length]
        .concat(means(item, experiment.metrics), [input.slice(0, 200)]);
      cells.forEach(function (text) { row.appendChild(el("td", "", text)); });
      rows.appendChild(row);
    });
    tbody.appendChild(rows);
  }

  function details(item, columns) {
    var row = el("tr", "item-details");
    var cell = el("td");
    cell.colSpan = columns;
    var data = item.data || {};
    if (!item.data) cell.appendChild(el("p", "empty", "The dataset item was not given to the report."));
    cell.appendChild(field("Input", data.input));
    cell.appendChild(field("Expected output", data.expected_output));
    var rest = {};
    Object.keys(data).forEach(function (k) {
      if (k !== "input" && k !== "expected_output") rest[k] = data[k];
    });
    if (Object.keys(rest).length) cell.appendChild(field("Other fields", rest));
    item.trials.forEach(function (t) {
      var box = el("div", "trial");
      box.dataset.trial = t.trial;
      box.dataset.status = t.status;
      box.dataset.passed = String(t.passed);
      // A soft-failed trial (html.py, softFailed) missed its thresholds without failing the session.
      var outcome = t.status === "pending" ? "pending" : t.passed ? "passed" : t.softFailed ? "soft-failed" : "failed";
      box.dataset.outcome = outcome;
      var state = t.status === "pending" ? "pending" : "completed, " + outcome;
      var facts = [];
      if (typeof t.seconds === "number") facts.push(duration(t.seconds));
      if (t.usage) facts.push(tokens(t.usage[0], t.usage[1]), t.usage[2] == null ? "cost unknown" : t.usage[2]);
      box.appendChild(el("h4", "", "Trial " + t.trial + ": " + state + (facts.length ? " \u00b7 " + facts.join(" \u00b7 ") : "")));
      if (t.status === "completed") {
        if (isConversation(t.output)) {
          box.appendChild(transcript(t.output.conversation, t.scores));
          var rest = {};
          // The last reply is the transcript's last message: the rest is what ended it, and any
          // key the test added.
          Object.keys(t.output).forEach(function (k) {
            if (k !== "conversation" && k !== "output") rest[k] = t.output[k];
          });
          if (Object.keys(rest).length) box.appendChild(el("pre", "output-rest", shown(rest)));
        } else {
          box.appendChild(el("pre", "output", shown(t.output)));
        }
      }
      if (t.scores.length) {
        var table = el("table", "scores");
        t.scores.forEach(function (s) {
          var line = el("tr", s[3] ? "score failed" : "score");
          line.dataset.metric = s[0];
          line.appendChild(el("td", "", s[0]));
          line.appendChild(el("td", "", s[3] ? "scoring failed" : num(s[1])));
          line.appendChild(el("td", "reason", s[2] == null ? "" : s[2]));
          if (s.length > 4) {
            var details = el("td", "metadata");
            details.appendChild(el("pre", "", shown(s[4])));
            line.appendChild(details);
          }
          table.appendChild(line);
        });
        box.appendChild(table);
        t.scores.forEach(function (s) {
          if (isTrajectory(s)) box.appendChild(trajectory(s[0], s[4]));
        });
      }
      if (t.spans) box.appendChild(spanTree(t));
      if (t.spansLeftOut) {
        box.appendChild(el("p", "empty spans-left-out", "Its span tree (" + t.spansLeftOut +
          " spans) is left out of this report to keep the file small; print it with: opik-eval show " + t.trace));
      }
      cell.appendChild(box);
    });
    row.appendChild(cell);
    return row;
  }

  // A ToolSequence score's metadata (metrics/trajectory.py): the expected calls beside the calls
  // made, in order, each marked missing, moved or extra.
  function isTrajectory(s) {
    var m = s.length > 4 ? s[4] : null;
    return !!m && typeof m.mode === "string" && Array.isArray(m.expected) && Array.isArray(m.actual);
  }
  function trajectory(name, m) {
    var box = el("div", "trajectory");
    box.appendChild(el("h4", "", name + ": tool calls (" + m.mode + ")"));
    var table = el("table", "trajectory");
    var head = el("tr");
    ["#", "expected", "made"].forEach(function (text) { head.appendChild(el("th", "", text)); });
    table.appendChild(head);
    var missing = {}, extra = {}, movedExpected = {}, movedActual = {};
    (m.missing || []).forEach(function (i) { missing[i] = true; });
    (m.extra || []).forEach(function (j) { extra[j] = true; });
    (m.moved || []).forEach(function (pair) { movedExpected[pair[0]] = pair[1]; movedActual[pair[1]] = pair[0]; });
    function call(entry) {
      var args = entry[1];
      return args == null ? entry[0] : entry[0] + "(" + (typeof args === "string" ? args : JSON.stringify(args)) + ")";
    }
    var rows = Math.max(m.expected.length, m.actual.length);
    for (var i = 0; i < rows; i++) {
      var row = el("tr");
      row.appendChild(el("td", "", String(i + 1)));
      var expected = m.expected[i], actual = m.actual[i];
      var mark = expected === undefined ? "" : missing[i] ? " missing" : i in movedExpected ? " moved" : "";
      row.appendChild(el("td", "call" + mark, expected === undefined ? "" : call(expected)));
      mark = actual === undefined ? "" : extra[i] ? " extra" : i in movedActual ? " moved" : "";
      row.appendChild(el("td", "call" + mark, actual === undefined ? "" : call(actual)));
      table.appendChild(row);
    }
    box.appendChild(table);
    return box;
  }

  // A conversation's output (run/conversation.py): its transcript as chat messages.
  function isConversation(output) {
    var messages = output && output.conversation;
    return Array.isArray(messages) && messages.length > 0 && messages.every(function (m) {
      return m && typeof m === "object" && typeof m.role === "string";
    });
  }
  // Each reply with its turn's scores from the per-turn metrics (metrics/conversation.py: a
  // score whose metadata holds "turns", [value, reason] per reply).
  function transcript(messages, scores) {
    var perTurn = scores.filter(function (s) {
      return s.length > 4 && s[4] && Array.isArray(s[4].turns);
    });
    var list = el("ol", "transcript");
    var turn = 0;
    messages.forEach(function (m) {
      var line = el("li", "message " + (m.role === "user" ? "user" : "assistant"));
      line.appendChild(el("span", "role", m.role));
      line.appendChild(el("span", "content", shown(m.content)));
      if (m.role === "assistant") {
        perTurn.forEach(function (s) {
          var found = s[4].turns[turn];
          if (!found) return;
          var chip = el("span", "turn-score", s[0] + " " + num(found[0]));
          if (found[1] != null) chip.title = String(found[1]);
          line.appendChild(chip);
        });
        turn += 1;
      }
      list.appendChild(line);
    });
    return list;
  }

  function toggle(row, experiment) {
    var open = row.getAttribute("aria-expanded") === "true";
    if (open) {
      row.parentNode.removeChild(row.nextElementSibling);
    } else {
      row.after(details(experiment.items[row.dataset.index], row.cells.length));
    }
    row.setAttribute("aria-expanded", String(!open));
  }

  // The A/B view: a row per item both runs planned, [id, baseline verdict, current verdict, flip,
  // [change per metric]], in the order the report gives (worst change of the first metric first);
  // a click on a metric's heading sorts by that change, worst first, then best first.
  function renderAb(section, ab) {
    var table = section.querySelector("table.ab");
    if (!table || !ab) return;
    var tbody = table.querySelector("tbody");
    var headings = table.querySelectorAll("th.sortable");
    var order = ab.items;
    function fill() {
      var rows = document.createDocumentFragment();
      order.forEach(function (item) {
        var row = el("tr", "ab-row");
        row.dataset.itemId = item[0];
        row.dataset.flip = item[3] || "";
        row.searchText = String(item[0]).toLowerCase();
        row.appendChild(el("td", "", item[0]));
        item[4].forEach(function (change) {
          var sign = typeof change === "number" ? (change < 0 ? " bad" : change > 0 ? " ok" : "") : "";
          row.appendChild(el("td", "change" + sign, signed(change)));
        });
        row.appendChild(el("td", "verdict " + item[1], item[1]));
        row.appendChild(el("td", "verdict " + item[2], item[2]));
        var flip = el("td", "flip");
        if (item[3]) flip.appendChild(el("span", "badge " + (item[3] === "regression" ? "bad" : "ok"), item[3]));
        row.appendChild(flip);
        rows.appendChild(row);
      });
      tbody.replaceChildren(rows);
      applyFilter();
    }
    function sortBy(heading) {
      var column = Number(heading.dataset.column);
      var worstFirst = heading.getAttribute("aria-sort") !== "ascending";
      headings.forEach(function (other) { other.setAttribute("aria-sort", "none"); });
      heading.setAttribute("aria-sort", worstFirst ? "ascending" : "descending");
      // A stable sort: items with the same change keep the report's order. No change comes last.
      order = ab.items.slice().sort(function (a, b) {
        var x = a[4][column], y = b[4][column];
        if (typeof x !== "number" || typeof y !== "number") {
          return (typeof x !== "number") - (typeof y !== "number");
        }
        return worstFirst ? x - y : y - x;
      });
      fill();
    }
    headings.forEach(function (heading) {
      heading.tabIndex = 0;
      heading.addEventListener("click", function () { sortBy(heading); });
      heading.addEventListener("keydown", function (event) {
        if (event.key === "Enter" || event.key === " ") {
          event.preventDefault();
          sortBy(heading);
        }
      });
    });
    section.querySelector("input.flips-only").addEventListener("change", applyFilter);
    fill();
  }

  function applyFilter() {
    var query = search.value.trim().toLowerCase();
    sections.forEach(function (section) {
      var rows = section.querySelectorAll("tr.item-row"), visible = 0;
      rows.forEach(function (row) {
        var hide = (failuresOnly.checked && row.dataset.verdict === "passed") ||
          (query !== "" && row.searchText.indexOf(query) < 0);
        row.hidden = hide;
        if (row.getAttribute("aria-expanded") === "true") row.nextElementSibling.hidden = hide;
        if (!hide) visible++;
      });
      section.querySelector(".item-count").textContent = "(" + visible + " of " + rows.length + " shown)";
      var flipsOnly = section.querySelector("input.flips-only");
      if (!flipsOnly) return;
      var abRows = section.querySelectorAll("tr.ab-row"), abVisible = 0;
      abRows.forEach(function (row) {
        var hide = (flipsOnly.checked && !row.dataset.flip) ||
          (query !== "" && row.searchText.indexOf(query) < 0);
        row.hidden = hide;
        if (!hide) abVisible++;
      });
      section.querySelector(".ab-count").textContent = "(" + abVisible + " of " + abRows.length + " shown)";
    });
  }

  sections.forEach(function (section, index) {
    var experiment = data.experiments[index];
    var tbody = section.querySelector("table.items tbody");
    renderRows(experiment, tbody);
    renderAb(section, experiment.ab);
    tbody.addEventListener("click", function (event) {
      var row = event.target.closest("tr.item-row");
      if (row) toggle(row, experiment);
    });
    tbody.addEventListener("keydown", function (event) {
      var row = event.target.closest("tr.item-row");
      if (row && (event.key === "Enter" || event.key === " ")) {
        event.preventDefault();
        toggle(row, experiment);
      }
    });
  });
  failuresOnly.addEventListener("change", applyFilter);
  search.addEventListener("input", applyFilter);
  applyFilter();
  document.body.dataset.rendered = "true";
})();
