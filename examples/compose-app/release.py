"""The release step: the schema, made through the app's DATABASE_URL."""
import os
import subprocess

subprocess.run(
    ["psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", os.environ["DATABASE_URL"], "-c",
     "CREATE TABLE IF NOT EXISTS visits (id serial PRIMARY KEY, at timestamptz DEFAULT now())"],
    check=True,
)
print("release: schema ready")
