// The login page's answer to a refused login. Gradio's login form says "Incorrect Credentials" for a 400 and
// nothing at all for anything else, so a locked-out owner typing the right password (429), a deactivated
// account (403) or a busy server (503) looked like a wrong password. This wraps fetch on the login page only
// (RequestGuard adds it to the app's page) and shows the server's own sentence above the form.
(() => {
  const nativeFetch = window.fetch.bind(window);
  const show = (text) => {
    let box = document.getElementById("studio-login-refusal");
    if (!text) {
      if (box) box.remove();
      return;
    }
    if (!box) {
      box = document.createElement("p");
      box.id = "studio-login-refusal";
      box.setAttribute("role", "alert");
      box.style.cssText = "color:#b91c1c;font-weight:600;margin:0.5em 0";
      const anchor = document.querySelector("h2");
      if (anchor) anchor.after(box); else document.body.prepend(box);
    }
    box.textContent = text;
  };
  // A login took 8-55 s on a busy server (the password hash waits for a core) with nothing on the page: a line
  // under the form says it is being checked, with the seconds so far, until the answer comes.
  const waiting = (text) => {
    let line = document.getElementById("studio-login-wait");
    if (!text) {
      if (line) line.remove();
      return;
    }
    if (!line) {
      line = document.createElement("p");
      line.id = "studio-login-wait";
      line.setAttribute("role", "status");
      line.style.cssText = "margin:0.5em 0;opacity:0.8";
      const form = document.querySelector("form");
      if (form) form.after(line); else document.body.prepend(line);
    }
    line.textContent = text;
  };
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
