"""WeChat Official Account: signature and AES message encryption, XML in, customer-service API out."""
