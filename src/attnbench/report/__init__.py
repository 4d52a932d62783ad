"""The report (Markdown and HTML) and terminal tables: `blocks` (what a report is made of and
the section registry), `build` (rendering), `sections`, `sections_detail`, `replay_section`,
`fp8_section`, `plots`, `plots_serving`, `table`. Import from the submodules.
"""
