"""The demo world: synthetic scenes of coloured shapes with known truth
(`scenes`), the demo dataset and judgements written from them (`dataset`,
`judgements`, `shifts`), and the demo CLIP's open_clip config (`clip_model`).
Its models are trained by capscope.train."""
