// Wharf console: the live chart of messages in/out per second (vanilla JS, no library).
// Polls the element's data-src (/api/rates) every interval and draws one SVG per refresh.
(function () {
  "use strict";
  var el = document.getElementById("chart");
  if (!el) { return; }
  var NS = "http://www.w3.org/2000/svg";
  var COLORS = { "in": "#1f6feb", "out": "#e36209" };

  function node(name, attrs) {
    var n = document.createElementNS(NS, name);
    Object.keys(attrs).forEach(function (k) { n.setAttribute(k, attrs[k]); });
    return n;
  }

  function draw(data) {
    var w = el.clientWidth || 600, h = el.clientHeight || 200, pad = 36;
    var points = [];
    data.brokers.forEach(function (b) { points = points.concat(b.series); });
    var svg = node("svg", { viewBox: "0 0 " + w + " " + h, role: "img" });
    if (!points.length) {
      var t = node("text", { x: pad, y: h / 2, fill: "#5b6573" });
      t.textContent = "collecting samples...";
      svg.appendChild(t);
      el.replaceChildren(svg);
      return;
    }
    var t0 = Math.min.apply(null, points.map(function (p) { return p.t; }));
    var t1 = Math.max.apply(null, points.map(function (p) { return p.t; }));
    var top = Math.max(1, Math.max.apply(null, points.map(function (p) { return Math.max(p["in"] || 0, p.out || 0); })));
    var x = function (t) { return pad + (t1 > t0 ? (t - t0) / (t1 - t0) : 1) * (w - pad - 8); };
    var y = function (v) { return h - 20 - (v / top) * (h - 32); };
    svg.appendChild(node("line", { x1: pad, y1: y(0), x2: w - 8, y2: y(0), stroke: "#d9dee5" }));
    var label = node("text", { x: 2, y: y(top) + 4, fill: "#5b6573", "font-size": 11 });
    label.textContent = Math.round(top).toLocaleString();
    svg.appendChild(label);
    data.brokers.forEach(function (b) {
      ["in", "out"].forEach(function (key) {
        var d = "", pen = "M";
        b.series.forEach(function (p) {
          if (p[key] === null) { pen = "M"; return; }  // a gap: the broker did not answer
          d += pen + x(p.t).toFixed(1) + " " + y(p[key]).toFixed(1) + " ";
          pen = "L";
        });
        if (d) { svg.appendChild(node("path", { d: d, fill: "none", stroke: COLORS[key], "stroke-width": 2, "class": "series-" + key })); }
      });
    });
    el.replaceChildren(svg);
  }

  function refresh() {
    fetch(el.dataset.src, { credentials: "same-origin" })
      .then(function (r) { return r.ok ? r.json() : Promise.reject(r.status); })
      .then(function (data) { draw(data); setTimeout(refresh, (data.interval_s || 2) * 1000); })
      .catch(function () { setTimeout(refresh, 5000); });
  }
  refresh();
})();
