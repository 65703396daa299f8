// A Web Worker for pages opened from disk (file://), where browsers refuse to start one: the worker's script runs in
// a hidden same-origin iframe instead, so that the site's search answers on site/index.html opened as a file.
// Written for the theme's search worker, which needs postMessage both ways, onmessage and importScripts.
(function () {
  "use strict";
  if (location.protocol !== "file:") {
    return;
  }

  class FrameWorker extends EventTarget {
    constructor(url) {
      super();
      this.frame = document.createElement("iframe");
      this.frame.hidden = true;
      document.body.appendChild(this.frame);
      const inner = this.frame.contentWindow;
      // What the worker's script calls on its global: its answers come out here, its imports load in order.
      inner.postMessage = (data) => this.emit(new MessageEvent("message", { data: data }));
      inner.importScripts = (...sources) => sources.reduce((loaded, source) => loaded.then(() => load(inner, source)),
        Promise.resolve());
      inner.addEventListener("error", (event) => this.emit(new ErrorEvent("error", { message: event.message })));
      this.ready = load(inner, String(url));
    }

    emit(event) {
      this.dispatchEvent(event);
      const handler = event.type === "message" ? this.onmessage : this.onerror;
      if (handler) {
        handler.call(this, event);
      }
    }

    postMessage(data) {
      const copy = structuredClone(data);
      this.ready.then(() => this.frame.contentWindow.dispatchEvent(new MessageEvent("message", { data: copy })));
    }

    terminate() {
      this.frame.remove();
    }
  }

  function load(inner, source) {
    return new Promise((resolve, reject) => {
      const script = inner.document.createElement("script");
      script.src = source;
      script.onload = resolve;
      script.onerror = reject;
      inner.document.body.appendChild(script);
    });
  }

  window.Worker = FrameWorker;
})();
