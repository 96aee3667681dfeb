// The login page's answer to a refused login. Gradio's login form says "Incorrect Credentials" for a 400 and
// nothing at all for anything else, so a locked-out owner typing the right password (429), a deactivated
// account (403) or a busy server (503) looked like a wrong password. This wraps fetch on the login page only
// (RequestGuard adds it to the app's page) and shows the server's own sentence above the form.
(() => {
  const nativeFetch = window.fetch.bind(window);
  // One line of text on the page, made the first time it is needed and removed when the text is empty.
  const line = (id, role, style, place) => (text) => {
    let box = document.getElementById(id);
    if (!text) {
      if (box) box.remove();
      return;
    }
    if (!box) {
      box = document.createElement("p");
      box.id = id;
      box.setAttribute("role", role);
      box.style.cssText = style;
      place(box);
    }
    box.textContent = text;
  };
  const after = (selector) => (box) => {
    const anchor = document.querySelector(selector);
    if (anchor) anchor.after(box); else document.body.prepend(box);
  };
  const show = line("studio-login-refusal", "alert", "color:#b91c1c;font-weight:600;margin:0.5em 0", after("h2"));
  // A login took 8-55 s on a busy server (the password hash waits for a core) with nothing on the page: a line
  // under the form says it is being checked, with the seconds so far, until the answer comes.
  const waiting = line("studio-login-wait", "status", "margin:0.5em 0;opacity:0.8", after("form"));
  const isLogin = (input, init) => {
    try {
      const url = typeof input === "string" ? input : (input && input.url) || "";
      const method = ((init && init.method) || (input && input.method) || "GET").toUpperCase();
      return method === "POST" && /\/login\/?$/.test(new URL(url, location.href).pathname);
    } catch (error) {
      return false;
    }
  };
  window.fetch = async (input, init) => {
    if (!isLogin(input, init)) return nativeFetch(input, init);
    const started = Date.now();
    const say = () => waiting(`⏳ Checking your password… (${Math.round((Date.now() - started) / 1000)} s)`);
    say();
    const ticker = setInterval(say, 1000);
    let response;
    try {
      response = await nativeFetch(input, init);
    } finally {
      clearInterval(ticker);
      waiting("");
    }
    try {
      let text = "";
      if (response.status !== 200 && response.status !== 400) {
        try {
          const body = await response.clone().json();
          text = typeof body.detail === "string" ? body.detail : "";
        } catch (error) { /* not JSON: the generic sentence below */ }
        text = text || `The server refused the login (HTTP ${response.status}); retry in a few seconds.`;
      }
      show(text);
      // An "Incorrect Credentials" left from an earlier try must not stand beside this answer.
      document.querySelectorAll(".creds").forEach((el) => { el.style.display = text ? "none" : ""; });
      // Accepted: the app's page loads next, which takes a moment of its own.
      if (response.status === 200) waiting("⏳ Signed in: opening the app…");
    } catch (error) { /* never break the login itself */ }
    return response;
  };
})();
