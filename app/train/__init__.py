"""Training capscope's models: the demo CLIP (`clip`) and the InfoMetIC head
(`infometic_trainer`, its setup in `infometic_setup`, its losses in
`infometic_losses`, its checkpoints in `infometic_checkpoints`, its data in
`infometic_data`), the bundled demo model
(`demo_model`), and fine-tuning from the team's labels (the `finetune`
package: its run and parts, its defaults in `finetune.defaults`; its data in
`training_data`)."""
