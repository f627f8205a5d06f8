// Starts ReDoc on /redoc, handing it the page's style nonce so that the <style> elements it adds
// pass the Content-Security-Policy (style-src 'self' 'nonce-…'); the bundle comes from fastapi-offline.
"use strict";
(function () {
  const root = document.getElementById("redoc");
  Redoc.init(root.dataset.openapiUrl, { nonce: document.currentScript.nonce }, root);
})();
