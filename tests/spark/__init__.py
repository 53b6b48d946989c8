"""heartwire.spark and heartwire report on a local SparkSession."""
