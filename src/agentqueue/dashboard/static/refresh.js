// Reload the page every data-refresh seconds while it is shown, unless someone is typing in it
// or has ticked something (reading never needs this script).
(function () {
  var secs = Number(document.body.getAttribute("data-refresh"));
  if (!secs) { return; }
  var touched = false;
  document.addEventListener("input", function () { touched = true; });
  document.addEventListener("change", function () { touched = true; });
  setInterval(function () {
    var active = document.activeElement;
    var typing = active && /^(INPUT|SELECT|TEXTAREA)$/.test(active.tagName);
    if (!document.hidden && !touched && !typing) { window.location.reload(); }
  }, secs * 1000);
})();
