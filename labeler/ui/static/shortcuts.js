() => {
  // Keyboard shortcuts for the Rate and Rank tabs. Installed once per page (app.load js=).
  // They only press the same buttons a mouse would, so the server sees identical events.
  if (window.__rlhfStudioShortcuts) return;
  window.__rlhfStudioShortcuts = true;

  const visible = (el) => !!el && el.offsetParent !== null;
  const byId = (id) => document.getElementById(id);
  const clickButton = (id) => {
    const el = byId(id);
    const button = el && (el.tagName === "BUTTON" ? el : el.querySelector("button"));
    if (button && visible(button) && !button.disabled) button.click();
    return !!button;
  };
  // A Gradio Radio renders <label><input type=radio> <span>label</span></label>; pick by the shown label.
  const pickRadio = (id, label) => {
    const root = byId(id);
    if (!visible(root)) return false;
    for (const lab of root.querySelectorAll("label")) {
      const span = lab.querySelector("span");
      const input = lab.querySelector("input[type=radio]");
      if (span && input && span.textContent.trim() === String(label)) {
        input.click();
        return true;
      }
    }
    return false;
  };
  const typing = (target) => {
    if (!target) return false;
    if (target.isContentEditable) return true;
    const tag = target.tagName;
    if (tag === "TEXTAREA" || tag === "SELECT") return true;
    return tag === "INPUT" && !["radio", "checkbox", "button", "submit"].includes((target.type || "").toLowerCase());
  };

  // Rank: type the response numbers best to worst ("3 1 2"); "=" ties the next one with the previous.
  let rank = { next: 1, last: 0, tie: false };
  const resetRank = () => { rank = { next: 1, last: 0, tie: false }; };

  document.addEventListener("keydown", (event) => {
    if (event.ctrlKey || event.metaKey || event.altKey || typing(event.target)) return;
    const key = event.key;
    if (visible(byId("rate-submit"))) {
      if (/^[0-9]$/.test(key)) {
        if (pickRadio("rate-score", key)) {
          event.preventDefault();
          // Let the Radio's change reach Gradio's store before the submit reads it.
          setTimeout(() => clickButton("rate-submit"), 150);
        }
      } else if (key === "s") { event.preventDefault(); clickButton("rate-skip"); }
      else if (key === "u") { event.preventDefault(); clickButton("rate-undo"); }
      return;
    }
    if (visible(byId("rank-submit"))) {
      if (/^[1-4]$/.test(key)) {
        const slot = Number(key);
        if (!visible(byId(`rank-slot-${slot}`))) return;
        const value = rank.tie && rank.last ? rank.last : rank.next;
        if (pickRadio(`rank-slot-${slot}`, value)) {
          event.preventDefault();
          rank.last = value;
          rank.next = value + 1;
          rank.tie = false;
        }
      } else if (key === "=") { event.preventDefault(); rank.tie = true; }
      else if (key === "Escape" || key === "Backspace") { event.preventDefault(); resetRank(); }
      else if (key === "Enter") { event.preventDefault(); resetRank(); clickButton("rank-submit"); }
      else if (key === "s") { event.preventDefault(); resetRank(); clickButton("rank-skip"); }
      else if (key === "u") { event.preventDefault(); resetRank(); clickButton("rank-undo"); }
    }
  });
}
