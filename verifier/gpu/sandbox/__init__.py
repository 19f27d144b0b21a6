"""The sandbox and recorder processes and the zygote that forks them (sandbox_process.py,
zygote.py): what runs beside a candidate's code. It never imports the judge's modules. No
pydantic."""
