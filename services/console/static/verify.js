// Verifies the audit records on the page in the browser, against the
// published JWKS, so that a reader need not trust the console: each
// record's Audit-ID is the SHA-256 of its JWS, its Ed25519 signature
// verifies with a published key (WebCrypto), and it names the record
// below it as previous_audit_id.
(function () {
  "use strict";
  const button = document.getElementById("verify-browser");
  if (!button) return;
  const out = document.getElementById("browser-verification");
  const enc = new TextEncoder(), dec = new TextDecoder();
  const b64u = (s) => {
    const b = atob(s.replace(/-/g, "+").replace(/_/g, "/") + "===".slice((s.length + 3) % 4));
    return Uint8Array.from(b, (c) => c.charCodeAt(0));
  };
  const hex = (buf) => Array.from(new Uint8Array(buf), (b) => b.toString(16).padStart(2, "0")).join("");
  button.addEventListener("click", async () => {
    out.textContent = "verifying…";
    out.className = "";
    try {
      if (!button.dataset.jwks) throw new Error("no published JWKS is configured");
      const res = await fetch(button.dataset.jwks, { credentials: "omit", cache: "no-store" });
      if (!res.ok) throw new Error("the JWKS answered " + res.status);
      const jwks = await res.json();
      const keys = {};
      for (const k of jwks.keys || []) {
        if (k.kty === "OKP" && k.crv === "Ed25519" && k.kid) {
          keys[k.kid] = await crypto.subtle.importKey("jwk", { kty: "OKP", crv: "Ed25519", x: k.x }, { name: "Ed25519" }, false, ["verify"]);
        }
      }
      const rows = Array.from(document.querySelectorAll("tr.record"));
      for (let i = 0; i < rows.length; i++) {
        const row = rows[i], jws = row.dataset.jws, id = row.dataset.auditId;
        const fail = (why) => {
          row.querySelector(".check").textContent = "✗";
          throw new Error("record " + id.slice(0, 16) + "…: " + why);
        };
        if (hex(await crypto.subtle.digest("SHA-256", enc.encode(jws))) !== id) fail("does not hash to its Audit-ID");
        const parts = jws.split(".");
        if (parts.length !== 3) fail("is not a compact JWS");
        const header = JSON.parse(dec.decode(b64u(parts[0])));
        const key = keys[header.kid];
        if (header.alg !== "EdDSA" || !key) fail("is signed with a key the JWKS does not publish");
        const good = await crypto.subtle.verify({ name: "Ed25519" }, key, b64u(parts[2]), enc.encode(parts[0] + "." + parts[1]));
        if (!good) fail("has a signature that does not verify");
        const payload = JSON.parse(dec.decode(b64u(parts[1])));
        if (i + 1 < rows.length && payload.previous_audit_id !== rows[i + 1].dataset.auditId) fail("does not link to the record below it");
        row.querySelector(".check").textContent = "✓";
      }
      out.textContent = "Verified in this browser: " + rows.length + " records, signed with published keys and linked.";
      out.className = "ok";
    } catch (e) {
      out.textContent = "Browser verification failed: " + e.message;
      out.className = "error";
    }
  });
})();
