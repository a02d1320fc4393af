"""The Gradio UI: `page` builds the six tabs (one module each: `inspect`,
`annotate`, `explore`, `benchmark`, `admin`, `compare`), which share what they
share through `shared` (capscope.pictures draws the images); `sessions` and
`queue_cap` keep sign-ins and a user's queued events bounded; `browser_latency`
measures keystroke-to-shading in a real browser."""
