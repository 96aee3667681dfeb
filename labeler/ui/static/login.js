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
  window.fetch = async (input, init) => {
    const response = await nativeFetch(input, init);
    try {
      const url = typeof input === "string" ? input : (input && input.url) || "";
      const method = ((init && init.method) || (input && input.method) || "GET").toUpperCase();
      if (method === "POST" && /\/login\/?$/.test(new URL(url, location.href).pathname)) {
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
      }
    } catch (error) { /* never break the login itself */ }
    return response;
  };
})();
