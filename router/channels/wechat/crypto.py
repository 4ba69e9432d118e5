"""WeChat Official Account message encryption (消息加解密, compatible and safe modes).

The scheme of WeChat's documentation and sample code (WXBizMsgCrypt):

* ``key = base64decode(EncodingAESKey + "=")`` (32 bytes), AES-256-CBC with ``IV = key[:16]``;
* plaintext = 16 random bytes + 4-byte big-endian length of the XML + the XML + the AppID,
  PKCS#7-padded to a multiple of **32** bytes, sent base64-encoded in ``<Encrypt>``;
* ``msg_signature = sha1(''.join(sorted([token, timestamp, nonce, Encrypt])))``.

The AppID inside the plaintext says whose key encrypted it: a wrong one is an authentication
failure, not a malformed body.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import secrets
import struct

from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

BLOCK_BITS = 256  # WeChat pads to 32-byte blocks, not AES's 16


class CryptoFormatError(ValueError):
    """The ciphertext is not valid base64 / AES-CBC / padding / framing."""


class WrongAppId(ValueError):
    """The message decrypted, but for another account."""


def msg_signature(token: str, timestamp: str, nonce: str, encrypt: str) -> str:
    return hashlib.sha1("".join(sorted([token, timestamp, nonce, encrypt])).encode()).hexdigest()


def aes_key(encoding_aes_key: str) -> bytes:
    """The 32-byte key of a 43-character EncodingAESKey; ValueError when it is not one."""
    if len(encoding_aes_key) != 43:
        raise ValueError("EncodingAESKey must be 43 characters")
    try:
        key = base64.b64decode(encoding_aes_key + "=", validate=True)
    except binascii.Error:
        raise ValueError("EncodingAESKey is not base64") from None
    if len(key) != 32:
        raise ValueError("EncodingAESKey must decode to 32 bytes")
    return key


class WeChatCrypto:
    def __init__(self, token: str, encoding_aes_key: str, app_id: str):
        self.token = token
        self.key = aes_key(encoding_aes_key)
        self.app_id = app_id

    def _cipher(self) -> Cipher:
        return Cipher(algorithms.AES(self.key), modes.CBC(self.key[:16]))

    def decrypt(self, encrypt: str) -> bytes:
        """The XML inside ``<Encrypt>``; CryptoFormatError or WrongAppId."""
        try:
            data = base64.b64decode(encrypt.strip(), validate=True)
        except (binascii.Error, ValueError):
            raise CryptoFormatError("Encrypt is not base64") from None
        if not data or len(data) % 32:
            raise CryptoFormatError("Encrypt is not a whole number of 32-byte blocks")
        decryptor = self._cipher().decryptor()
        plain = decryptor.update(data) + decryptor.finalize()
        unpadder = padding.PKCS7(BLOCK_BITS).unpadder()
        try:
            plain = unpadder.update(plain) + unpadder.finalize()
        except ValueError:
            raise CryptoFormatError("bad padding (wrong EncodingAESKey?)") from None
        if len(plain) < 20:
            raise CryptoFormatError("decrypted message too short")
        (length,) = struct.unpack(">I", plain[16:20])
        if 20 + length > len(plain):
            raise CryptoFormatError("decrypted length out of range (wrong EncodingAESKey?)")
        xml, app_id = plain[20:20 + length], plain[20 + length:]
        if not secrets.compare_digest(app_id, self.app_id.encode()):
            raise WrongAppId("the message is for another AppID")
        return xml

    def encrypt(self, xml: str) -> str:
        """``xml`` as the base64 ``Encrypt`` value."""
        body = xml.encode("utf-8")
        plain = secrets.token_bytes(16) + struct.pack(">I", len(body)) + body + self.app_id.encode()
        padder = padding.PKCS7(BLOCK_BITS).padder()
        padded = padder.update(plain) + padder.finalize()
        encryptor = self._cipher().encryptor()
        return base64.b64encode(encryptor.update(padded) + encryptor.finalize()).decode("ascii")

    def seal(self, xml: str, timestamp: str, nonce: str) -> str:
        """The encrypted passive reply: ``<xml><Encrypt/><MsgSignature/><TimeStamp/><Nonce/></xml>``."""
        encrypt = self.encrypt(xml)
        sig = msg_signature(self.token, timestamp, nonce, encrypt)
        return (f"<xml><Encrypt><![CDATA[{encrypt}]]></Encrypt><MsgSignature><![CDATA[{sig}]]></MsgSignature>"
                f"<TimeStamp>{timestamp}</TimeStamp><Nonce><![CDATA[{nonce}]]></Nonce></xml>")
