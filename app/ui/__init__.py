"""The Gradio UI: `page` builds the five tabs (one module each: `inspect`,
`annotate`, `explore`, `benchmark`, `admin`; capscope.pictures draws the images),
`browser_latency` measures keystroke-to-shading in a real browser."""
