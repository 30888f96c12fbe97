"""What a payload is where it is kept: codecs, blob stores, stored payload text."""
