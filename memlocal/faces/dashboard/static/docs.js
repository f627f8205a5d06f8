// Starts Swagger UI on /docs. A file rather than an inline script, so the page keeps the
// dashboard's Content-Security-Policy (script-src 'self'); the bundle comes from fastapi-offline.
"use strict";
(function () {
  const root = document.getElementById("swagger-ui");
  window.ui = SwaggerUIBundle({
    url: root.dataset.openapiUrl,
    dom_id: "#swagger-ui",
    layout: "BaseLayout",
    deepLinking: true,
    showExtensions: true,
    showCommonExtensions: true,
    validatorUrl: null, // the default badge asks an online validator about the schema
    presets: [SwaggerUIBundle.presets.apis],
  });
})();
