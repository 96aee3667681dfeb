() => {
  // Keyboard shortcuts for the Rate and Rank tabs. Installed once per page (app.load js=).
  // They press the same buttons a mouse would, so the server sees the same events.
  //
  // Keys are queued, never dropped: a key that needs the server (a digit in Rate, Enter, s, u, r) sends one
  // request and the keys typed while it is in flight wait in `queue`, in order, until the tab's
  // `.success/.failure(js=DONE_JS)` calls window.__rlhfStudioDone() (on success and on a refusal alike). A fast
  // typist's ten digits are ten labels, each on the item that was on screen when its turn came.
  if (window.__rlhfStudioShortcuts) return;
  window.__rlhfStudioShortcuts = true;

  const visible = (el) => !!el && el.offsetParent !== null;
  const byId = (id) => document.getElementById(id);
  const buttonOf = (id) => {
    const el = byId(id);
    const button = el && (el.tagName === "BUTTON" ? el : el.querySelector("button"));
    return button && visible(button) && !button.disabled ? button : null;
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

  // What a keyboard submit hands to the event's js preprocessor (rate.SUBMIT_JS, rank.SUBMIT_JS): the score
  // or ranks typed, read once. The Radio's own change may not have reached Gradio's store yet.
  let typed = null;
  window.__rlhfStudioTake = (tab) => {
    if (!typed || typed.tab !== tab) return null;
    const value = typed.value;
    typed = null;
    return value;
  };

  // Rate with the project's questions (criteria shown as #rate-criterion-K, flags in #rate-flags): digits score
  // the highlighted question (the main score first, then each criterion) and move to the next, letters tick
  // flags (labelling.FLAG_KEYS), "e" opens the correction with the shown answer in it, Enter submits it all.
  // The values go with the submit read from the page (rate.SUBMIT_JS), as a digit's score does.
  const FLAG_KEYS = "abcdfghi";
  const CRITERION_SLOTS = 6; // labelling.MAX_CRITERIA
  let rateFocus = 0; // 0: the main score, k: criterion slot k
  const rateCriteria = () => {
    const shown = [];
    for (let k = 1; k <= CRITERION_SLOTS; k++) if (visible(byId(`rate-criterion-${k}`))) shown.push(`rate-criterion-${k}`);
    return shown;
  };
  const rateFlags = () => {
    const root = byId("rate-flags");
    return visible(root) ? [...root.querySelectorAll("input[type=checkbox]")] : [];
  };
  const asking = () => rateCriteria().length > 0 || rateFlags().length > 0;
  const highlight = () => {
    const ids = ["rate-score", ...rateCriteria()];
    ids.forEach((id, k) => { const el = byId(id); if (el) el.style.outline = k === rateFocus ? "2px solid #f59e0b" : ""; });
  };
  const checkedValue = (id) => {
    const input = byId(id) && byId(id).querySelector("input[type=radio]:checked");
    const span = input && input.closest("label").querySelector("span");
    return span ? Number(span.textContent.trim()) : null;
  };
  // A flag's choice reads "name (key)" (labelling.flag_choices): its name is the label less the key.
  const flagName = (input) => input.closest("label").querySelector("span").textContent.trim().replace(/ \([a-z]\)$/, "");
  const rateTyped = () => ({
    score: checkedValue("rate-score"),
    flags: rateFlags().filter((box) => box.checked).map(flagName),
    criteria: Array.from({ length: CRITERION_SLOTS }, (_, k) => checkedValue(`rate-criterion-${k + 1}`)),
  });
  const openCorrection = () => {
    const box = byId("rate-correction");
    const area = box && box.querySelector("textarea");
    if (!area || !visible(area)) return;
    if (!area.value.trim()) {
      area.value = byId("rate-response").innerText.trim();
      area.dispatchEvent(new Event("input", { bubbles: true })); // Gradio's store follows the input event
    }
    area.focus();
  };

  // Rank: type the response numbers best to worst ("3 1 2"); "=" ties the next one with the previous.
  // values[k - 1] is answer k's rank; slots not typed stay holes, which rank.SUBMIT_JS sends as null.
  let rank = { next: 1, last: 0, tie: false, values: [] };
  const resetRank = () => { rank = { next: 1, last: 0, tie: false, values: [] }; };

  // Rank with the project's questions (per answer N: flags #rank-flags-N, criteria #rank-criterion-N-K). The
  // digits rank, so the questions take a focus first: "j" / "k" move it to the next / previous answer (past the
  // last, back to ranking); while an answer has it, digits score its highlighted criterion and move to the next,
  // letters tick its flags (labelling.FLAG_KEYS), Esc gives the digits back to ranking. "e" opens the correction
  // with the answer ranked first in it; Enter submits the ranking and every answer's questions once, read from
  // the page (rank.SUBMIT_JS), as Rate's Enter does.
  let rankFocus = 0; // 0: the digits rank; N: answer N's questions
  let rankCriterion = 0; // the highlighted criterion of the focused answer
  const rankSlots = () => {
    const shown = [];
    for (let n = 1; n <= 9; n++) if (visible(byId(`rank-slot-${n}`))) shown.push(n);
    return shown;
  };
  const rankCriteria = (n) => {
    const shown = [];
    for (let k = 1; k <= CRITERION_SLOTS; k++) if (visible(byId(`rank-criterion-${n}-${k}`))) shown.push(`rank-criterion-${n}-${k}`);
    return shown;
  };
  const rankFlags = (n) => {
    const root = byId(`rank-flags-${n}`);
    return visible(root) ? [...root.querySelectorAll("input[type=checkbox]")] : [];
  };
  const rankAsking = () => rankSlots().some((n) => rankCriteria(n).length > 0 || rankFlags(n).length > 0);
  const rankHighlight = () => {
    for (const n of rankSlots()) {
      const column = byId(`rank-slot-${n}`).closest(".studio-response");
      if (column) column.style.outline = n === rankFocus ? "2px solid #f59e0b" : "";
      rankCriteria(n).forEach((id, k) => {
        byId(id).style.outline = n === rankFocus && k === rankCriterion ? "2px solid #f59e0b" : "";
      });
    }
  };
  const moveRankFocus = (step) => {
    const slots = [0, ...rankSlots()];
    const at = Math.max(0, slots.indexOf(rankFocus));
    rankFocus = slots[(at + step + slots.length) % slots.length];
    rankCriterion = 0;
    rankHighlight();
  };
  const leaveRankFocus = () => { rankFocus = 0; rankCriterion = 0; rankHighlight(); };
  // What Enter sends: the ranks typed (null where none: the radios as they are) and every answer's questions.
  const rankTyped = (values) => ({
    ranks: values.some((v) => v !== null && v !== undefined) ? values : null,
    slots: Array.from({ length: 9 }, (_, i) => ({
      flags: rankFlags(i + 1).filter((box) => box.checked).map(flagName),
      criteria: Array.from({ length: CRITERION_SLOTS }, (_, k) => checkedValue(`rank-criterion-${i + 1}-${k + 1}`)),
    })),
  });
  // The answer's text without its "Answer N" heading.
  const rankAnswerText = (n) => {
    const el = byId(`rank-text-${n}`);
    if (!el) return "";
    const heading = el.querySelector("h4");
    const text = el.innerText.trim();
    return heading && text.startsWith(heading.innerText.trim()) ? text.slice(heading.innerText.trim().length).trim() : text;
  };
  const openRankCorrection = () => {
    const area = byId("rank-correction") && byId("rank-correction").querySelector("textarea");
    if (!area || !visible(area)) return;
    const first = rankSlots().find((n) => checkedValue(`rank-slot-${n}`) === 1);
    if (!area.value.trim() && first) {
      area.value = rankAnswerText(first);
      area.dispatchEvent(new Event("input", { bubbles: true }));
    }
    area.focus();
  };

  const queue = [];
  let inFlight = null; // the timer of the request in flight, or null
  // A request whose done signal never comes (a dropped connection) must not block the keyboard for good.
  const STUCK_MS = 20000;
  const status = (text) => {
    const counter = byId("rate-counter");
    if (counter) counter.setAttribute("data-queued", String(queue.length));
    if (text) console.warn("RLHF Studio shortcuts:", text);
  };

  const send = (buttonId, tab, value) => {
    const button = buttonOf(buttonId);
    if (!button) return false;
    typed = value === undefined ? null : { tab, value };
    inFlight = setTimeout(() => { status("no answer from the server; sending the next key"); finish(); }, STUCK_MS);
    button.click();
    return true;
  };
  const finish = () => {
    if (inFlight !== null) clearTimeout(inFlight);
    inFlight = null;
    typed = null;
    // Let Gradio apply the outputs (the next item, its key) before the next key reads them.
    setTimeout(pump, 0);
  };
  window.__rlhfStudioDone = finish;

  // One key's action; returns true when it sent a request (the queue then waits for its answer).
  const act = (key) => {
    if (visible(byId("rate-submit")) && asking()) {
      const ids = ["rate-score", ...rateCriteria()];
      if (/^[0-9]$/.test(key)) {
        if (!pickRadio(ids[Math.min(rateFocus, ids.length - 1)], key)) { status(`no score ${key} here`); return false; }
        rateFocus = Math.min(rateFocus + 1, ids.length - 1);
        highlight();
        return false;
      }
      const flag = FLAG_KEYS.indexOf(key);
      if (flag >= 0 && key.length === 1) {
        const boxes = rateFlags();
        if (flag < boxes.length) boxes[flag].click();
        return false;
      }
      if (key === "e") { openCorrection(); return false; }
      rateFocus = 0;
      highlight();
      if (key === "Enter") return send("rate-submit", "rate", rateTyped());
      if (key === "s") return send("rate-skip");
      if (key === "u") return send("rate-undo");
      if (key === "r") return send("rate-refresh");
      return false;
    }
    if (visible(byId("rate-submit"))) {
      if (key === "e") { openCorrection(); return false; }
      if (/^[0-9]$/.test(key)) {
        // The radio shows the choice; the score itself travels through __rlhfStudioTake.
        if (!pickRadio("rate-score", key)) { status(`no score ${key} on this scale`); return false; }
        return send("rate-submit", "rate", Number(key));
      }
      if (key === "s") return send("rate-skip");
      if (key === "u") return send("rate-undo");
      if (key === "r") return send("rate-refresh");
      return false;
    }
    if (visible(byId("rank-submit"))) {
      if (key === "e") { openRankCorrection(); return false; }
      if (rankAsking()) {
        if (key === "j" || key === "k") { moveRankFocus(key === "j" ? 1 : -1); return false; }
        if (rankFocus && key === "Escape") { leaveRankFocus(); return false; }
        if (rankFocus && /^[0-9]$/.test(key)) {
          const ids = rankCriteria(rankFocus);
          if (!ids.length || !pickRadio(ids[Math.min(rankCriterion, ids.length - 1)], key)) {
            status(`no score ${key} here`);
            return false;
          }
          rankCriterion = Math.min(rankCriterion + 1, ids.length - 1);
          rankHighlight();
          return false;
        }
        const flag = FLAG_KEYS.indexOf(key);
        if (flag >= 0 && key.length === 1) {
          const boxes = rankFocus ? rankFlags(rankFocus) : [];
          if (flag < boxes.length) boxes[flag].click();
          else status(rankFocus ? `no flag ${key} here` : "press j to pick an answer first");
          return false;
        }
      }
      // Answers 1-9 are one key each (an item holds at most labeling.MAX_RANKING_SIZE = 8); a slot that is
      // not shown ignores its key.
      if (/^[1-9]$/.test(key)) {
        const slot = Number(key);
        if (!visible(byId(`rank-slot-${slot}`))) return false;
        const value = rank.tie && rank.last ? rank.last : rank.next;
        if (pickRadio(`rank-slot-${slot}`, value)) {
          rank.values[slot - 1] = String(value);
          rank.last = value;
          rank.next = value + 1;
          rank.tie = false;
        }
        return false;
      }
      if (key === "=") { rank.tie = true; return false; }
      if (key === "Escape" || key === "Backspace") { resetRank(); return false; }
      const values = rank.values;
      const asked = rankAsking();
      resetRank();
      leaveRankFocus();
      if (key === "Enter") {
        // Ranks typed on the keyboard go with the submit; none typed: the radios (mouse) as they are. With
        // questions, their answers too, read from the page now (Gradio's store may lag the clicks).
        if (asked) return send("rank-submit", "rank", rankTyped(values));
        return send("rank-submit", "rank", values.some((v) => v !== null) ? values : undefined);
      }
      if (key === "s") return send("rank-skip");
      if (key === "u") return send("rank-undo");
      if (key === "r") return send("rank-refresh");
    }
    return false;
  };

  const pump = () => {
    while (inFlight === null && queue.length) {
      act(queue.shift());
    }
    status();
  };

  // A mouse click on a labelling button is a request in flight too: keys typed meanwhile wait for it.
  const LABEL_BUTTONS = ["rate-submit", "rate-skip", "rate-undo", "rate-refresh",
                         "rank-submit", "rank-skip", "rank-undo", "rank-refresh"];
  document.addEventListener("click", (event) => {
    if (!event.isTrusted || inFlight !== null) return;
    const hit = LABEL_BUTTONS.some((id) => { const el = byId(id); return el && el.contains(event.target); });
    if (hit) inFlight = setTimeout(finish, STUCK_MS);
  }, true);

  // An empty queue looks again by itself: while Rate or Rank says "All done" on screen, its
  // Refresh is pressed every EMPTY_POLL_MS, so answers generated in the background (a run, the Data tab, the
  // CLI) appear without a reload, as Label Studio's and Argilla's queues do. Only the shown tab, only in a
  // visible browser tab, never while a label is in flight; a queue with work is not polled at all.
  const EMPTY_POLL_MS = 5000;
  const EMPTY_QUEUES = [["rate-prompt", "rate-refresh"], ["rank-prompt", "rank-refresh"]];
  setInterval(() => {
    if (document.visibilityState !== "visible" || inFlight !== null || queue.length) return;
    for (const [promptId, refreshId] of EMPTY_QUEUES) {
      const prompt = byId(promptId);
      if (visible(prompt) && prompt.innerText.trim().startsWith("All done")) {
        const button = buttonOf(refreshId);
        if (button) button.click();
      }
    }
  }, EMPTY_POLL_MS);

  // Whether the user is at the Rate or Rank tab now (labelling.COUNT_JS asks before each live count): its tab
  // shown, the browser tab in front, and a key, click, scroll or pointer move in the last ACTIVE_MS. The count
  // renews the user's hold on an item a training run waits for; an idle user's hold lapses
  // (labeling.RUN_ITEM_IDLE_SECONDS = 60 s) and the item goes to the next annotator.
  const ACTIVE_MS = 45000;
  let lastActive = Date.now();
  for (const type of ["keydown", "pointerdown", "pointermove", "wheel", "touchstart"]) {
    document.addEventListener(type, () => { lastActive = Date.now(); }, { capture: true, passive: true });
  }
  window.__rlhfStudioActive = (tab) => document.visibilityState === "visible"
    && visible(byId(`${tab}-submit`)) && Date.now() - lastActive < ACTIVE_MS;

  const HANDLED = /^([0-9=sure]|Enter|Escape|Backspace)$/;
  // Rank's keys with questions: j / k (the answer in focus) and the flags' letters too.
  const RANK_ASKING_KEYS = /^([0-9=surejkabcdfghi]|Enter|Escape|Backspace)$/;
  // Rate's own keys: e (the correction) always; with questions, Enter and the flags' letters too.
  const RATE_KEYS = /^[0-9sure]$/;
  const RATE_ASKING_KEYS = /^([0-9sureabcdfghi]|Enter)$/;
  document.addEventListener("keydown", (event) => {
    // Esc leaves the correction or the comment box, so the keys score again.
    if (event.key === "Escape" && event.target && event.target.closest
        && event.target.closest("#rate-correction, #rate-comment, #rank-correction, #rank-comment")) {
      event.target.blur();
      event.preventDefault();
      return;
    }
    if (event.ctrlKey || event.metaKey || event.altKey || typing(event.target)) return;
    const key = event.key;
    const onRate = visible(byId("rate-submit"));
    const onRank = !onRate && visible(byId("rank-submit"));
    if (!onRate && !onRank) return;
    if (onRate && !(asking() ? RATE_ASKING_KEYS : RATE_KEYS).test(key)) return;
    if (onRank && !(rankAsking() ? RANK_ASKING_KEYS : HANDLED).test(key)) return;
    event.preventDefault();
    queue.push(key);
    pump();
  });
}
