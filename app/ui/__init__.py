"""The Gradio UI: `page` builds the five tabs (one module each: `inspect`,
`annotate`, `explore`, `benchmark`, `admin`), `draw` draws images and words,
`browser_latency` measures keystroke-to-shading in a real browser."""
